"""The checkpoint manager a trainer calls: `save` (asynchronous), `wait`, `load`, `latest`.

`save` blocks only to copy this rank's share of the state into host memory (each rank owns about
1/W of the replicated state; see `plan`). A background thread then writes that share as a
safetensors shard (hashed, fsynced), pushes it to the next rank's peer memory, and joins the other
ranks on a gloo group of its own; rank 0 writes the manifest, which commits the checkpoint, then
applies retention and publishes the artifact. A new `save` first waits for the previous one, and
the snapshot is a copy, so steps taken after `save` returns never leak into it.
"""

import hashlib
import threading
from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from shipyard.checkpoint.corrupt import CORRUPT, CorruptCheckpoint
from shipyard.checkpoint.flatten import flatten
from shipyard.checkpoint.handle import SaveHandle, SaveJob
from shipyard.checkpoint.load import Loaded, load_committed
from shipyard.checkpoint.manifest import (
    MANIFEST,
    CheckpointManifest,
    Committed,
    ShardRecord,
    commit,
    committed,
    read_committed,
    shard_name,
    step_dir,
)
from shipyard.checkpoint.peer import MANIFEST_OWNER, PeerMemory, push, restore_from_peers
from shipyard.checkpoint.peer_key import peer_secret
from shipyard.checkpoint.plan import Piece, describe, split
from shipyard.checkpoint.publish import Publish, publish
from shipyard.checkpoint.retention import Retention, apply_retention
from shipyard.checkpoint.rng import capture_rng
from shipyard.checkpoint.safetensors_io import raw_bytes, write_safetensors
from shipyard.checkpoint.verify import latest_committed
from shipyard.durable import fsync_dir
from shipyard.errors import InvalidInput, NotFound, StorageError
from shipyard.hashing import canonical_json
from shipyard.provenance import code_version


class CheckpointManager:
    """Sharded, asynchronous, verified checkpoints under `root` for this process's rank.

    With `torch.distributed` initialized, every rank constructs one, in the same order relative
    to other collectives (construction creates a gloo group). Without it, a single rank.
    """

    def __init__(
        self,
        root: str | Path,
        *,
        retention: Retention | None = None,
        peer_memory: bool | PeerMemory = True,
        publish_to: Publish | None = None,
        config: Mapping[str, Any] | None = None,
        timeout_s: float = 1800.0,
    ) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.retention = retention or Retention()
        self.publish_to = publish_to
        self.config_hash = (
            hashlib.sha256(canonical_json(dict(config))).hexdigest() if config else None
        )
        distributed = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank() if distributed else 0
        self.world_size = dist.get_world_size() if distributed else 1
        # Its own group, so background collectives never interleave with the trainer's.
        self._group = (
            dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s))
            if distributed
            else None
        )
        # A rank that survives a restart passes its old PeerMemory on, snapshots and all.
        self._owns_peer = not isinstance(peer_memory, PeerMemory)
        if isinstance(peer_memory, PeerMemory):
            self.peer: PeerMemory | None = peer_memory
        else:  # every rank under this root, now or in a later attempt, has the same key
            self.peer = PeerMemory(peer_secret(self.root)) if peer_memory else None
        self.peer_addresses: list[str] = []
        self._peer_key = None if self.peer is None else self.peer.client_key()
        if self.peer is not None:
            self.peer_addresses = self._all_gather(self.peer.address)
        self._job: SaveJob | None = None
        self._thread: threading.Thread | None = None
        self._plans: dict[tuple[Any, ...], list[Piece]] = {}
        # Two sets of snapshot buffers: one may hold the committed snapshot peers can ask for.
        self._slots: list[dict[Piece, torch.Tensor]] = [{}, {}]
        self._committed_slot = 1

    # Saving

    def save(
        self,
        step: int,
        state: Any,
        *,
        loader: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        blocking: bool = False,
    ) -> SaveHandle:
        """Snapshot `state` (nested dicts/lists of tensors and JSON values) and persist it.

        `loader` is the loader position to record (e.g. `Sampler.position(step)`).
        """
        if step < 0:
            raise InvalidInput(f"checkpoint step must be >= 0, got {step}")
        self.wait()
        skeleton, tensors = flatten(state)
        metas = describe(tensors)
        signature = tuple((m.path, m.dtype, m.shape) for m in metas)
        pieces = self._plans.get(signature)
        if pieces is None:
            pieces = self._plans[signature] = split(metas, self.world_size)
        slot = 1 - self._committed_slot
        buffers = self._slots[slot]
        mine = []
        for piece in (p for p in pieces if p.rank == self.rank):
            source = tensors[piece.path].reshape(-1)[piece.start : piece.stop]
            buffer = buffers.get(piece)
            if buffer is None:
                pin = source.device.type == "cuda"
                buffer = buffers[piece] = torch.empty(
                    piece.stop - piece.start, dtype=source.dtype, pin_memory=pin
                )
            buffer.copy_(source, non_blocking=True)
            mine.append((piece, buffer))
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        if self.peer is not None and self.world_size > 1:
            # Before this rank's barrier, so before the predecessor can push: exactly its share.
            itemsize = {m.path: m.dtype.itemsize for m in metas}
            predecessor = (self.rank - 1) % self.world_size
            share = sum(
                (p.stop - p.start) * itemsize[p.path] for p in pieces if p.rank == predecessor
            )
            self.peer.expect(step, predecessor, share)
        job = SaveJob(
            step, skeleton, pieces, mine, capture_rng(), loader, dict(metadata or {}), metas
        )
        self._job = job
        self._thread = threading.Thread(
            target=self._persist, args=(job, slot), name=f"checkpoint-{step}", daemon=True
        )
        self._thread.start()
        handle = SaveHandle(job)
        if blocking:
            handle.result()
        return handle

    def settle(self, timeout: float) -> bool:
        """Let the save in flight finish for up to `timeout` seconds; True when none is left
        running. For a rank about to exit that must not hang on a peer that is gone."""
        if self._thread is not None:
            self._thread.join(timeout)
        return self._thread is None or not self._thread.is_alive()

    def wait(self) -> Committed | None:
        """Wait for the save in flight, if any; returns what it committed.

        Raises its error unless the trainer already got it from the save's handle.
        """
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        job, self._job = self._job, None
        if job is None or (job.error is not None and job.reported):
            return None
        return SaveHandle(job).result()

    def _persist(self, job: SaveJob, slot: int) -> None:
        try:
            job.result = self._write_and_commit(job, slot)
        except BaseException as exc:  # surfaced by SaveHandle.result()
            job.error = exc
        finally:
            job.done.set()

    def _write_and_commit(self, job: SaveJob, slot: int) -> Committed:
        directory = step_dir(self.root, job.step)
        record, error = None, None
        try:
            if self.rank == 0:  # a re-save of a step: uncommit the old one before shards change
                directory.mkdir(exist_ok=True)
                (directory / MANIFEST).unlink(missing_ok=True)
                (directory / CORRUPT).unlink(missing_ok=True)  # the new bytes are not the bad ones
                fsync_dir(directory)
        except Exception as exc:
            error = f"rank 0: {exc!r}"
        self._barrier()  # every failure below is reported through the gather, never a hang
        try:
            if error is None:
                name = shard_name(self.rank, self.world_size)
                digest = write_safetensors(directory / name, [(p.key, b) for p, b in job.mine])
                record = ShardRecord(name, self.rank, digest)
                self._hold_and_push(job)
        except Exception as exc:
            error = f"rank {self.rank}: {exc!r}"
        reports = self._all_gather((record, job.rng, error))
        outcome: tuple[bytes | None, str | None] = (None, None)
        if self.rank == 0:
            outcome = self._commit(job, directory, reports)
        manifest_json, failure = self._broadcast(outcome)
        if failure or manifest_json is None:
            raise StorageError(f"checkpoint of step {job.step} was not committed: {failure}")
        manifest = CheckpointManifest.from_json(manifest_json, str(directory / MANIFEST))
        self._committed_slot = slot
        if self.peer is not None:
            self.peer.hold(job.step, MANIFEST_OWNER, [memoryview(manifest_json)])
            self.peer.drop_before(job.step)
        return Committed(directory, manifest)

    def _hold_and_push(self, job: SaveJob) -> None:
        if self.peer is None:
            return
        views = [raw_bytes(b) for _, b in job.mine]
        self.peer.hold(job.step, self.rank, views)
        if self.world_size > 1:
            successor = self.peer_addresses[(self.rank + 1) % self.world_size]
            assert self._peer_key is not None
            push(successor, job.step, self.rank, views, self._peer_key)

    def _commit(
        self, job: SaveJob, directory: Path, reports: list[Any]
    ) -> tuple[bytes | None, str | None]:
        errors = [error for _, _, error in reports if error]
        if errors:
            return None, "; ".join(errors)
        try:
            manifest = CheckpointManifest(
                step=job.step,
                world_size=self.world_size,
                shards=[record for record, _, _ in reports],
                tensors=job.metas,
                pieces=job.pieces,
                skeleton=job.skeleton,
                rng=[rng for _, rng, _ in reports],
                loader=job.loader,
                config_hash=self.config_hash,
                code_version=code_version(),
                metadata=job.metadata,
            )
            done = commit(directory, manifest)
            fsync_dir(self.root)
            apply_retention(self.root, self.retention)
            if self.publish_to is not None:
                job.artifact_id = publish(done, self.publish_to)
            return manifest.to_json(), None
        except Exception as exc:
            return None, f"rank 0 could not commit: {exc!r}"

    # Collectives on the checkpoint group (no-ops on a single rank)

    def _barrier(self) -> None:
        if self._group is not None:
            dist.barrier(group=self._group)

    def _all_gather(self, value: Any) -> list[Any]:
        if self._group is None:
            return [value]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, value, group=self._group)
        return out

    def _broadcast(self, value: Any) -> Any:
        if self._group is None:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0, group=self._group)
        return box[0]

    # Loading

    def latest_committed(self, *, verify: bool = True) -> Committed | None:
        """See `shipyard.checkpoint.latest_committed`."""
        return latest_committed(self.root, verify=verify)

    def load(
        self,
        which: Committed | int | None = None,
        on_corrupt: Callable[[CorruptCheckpoint], None] | None = None,
    ) -> Loaded:
        """Load (verifying every shard's SHA-256) the given step, or else the newest committed
        one that verifies: each that does not is marked corrupt, passed to `on_corrupt`, and
        the one before it is tried."""
        if which is not None:  # asked for by number: its refusal is the answer, not a fallback
            found = read_committed(step_dir(self.root, which)) if isinstance(which, int) else which
            return load_committed(found)
        for candidate in reversed(committed(self.root)):
            try:
                return load_committed(candidate)
            except CorruptCheckpoint as exc:
                if on_corrupt is not None:
                    on_corrupt(exc)
        raise NotFound(f"no committed checkpoint under {self.root} verifies")

    def restore_from_peers(
        self,
        step: int | None = None,
        manifest: CheckpointManifest | None = None,
        addresses: list[str] | None = None,
    ) -> Loaded:
        """The newest (or `step`'s) committed snapshot from peer memory, without storage; with
        `manifest`, the peers' bytes are checked against that one (see `restore_from_peers`).
        `addresses`: another set of peers under the same root (a previous attempt's ranks)."""
        if self._peer_key is None:
            raise NotFound("this checkpoint manager runs without peer memory")
        peers = self.peer_addresses if addresses is None else addresses
        return restore_from_peers(peers, step, manifest, key=self._peer_key)

    def close(self) -> None:
        try:
            self.wait()
        finally:
            if self.peer is not None and self._owns_peer:
                self.peer.close()
