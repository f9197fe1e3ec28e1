"""Rebuild a saved state from its pieces, from storage (checksums verified) or from memory.

Every piece of every tensor is copied into place, whichever rank wrote it, so a checkpoint saved
on any world size loads on any other, bitwise.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from shipyard.checkpoint.flatten import unflatten
from shipyard.checkpoint.manifest import CheckpointManifest, Committed, shard_path
from shipyard.checkpoint.plan import Piece
from shipyard.checkpoint.rng import restore_rng
from shipyard.checkpoint.safetensors_io import parse_safetensors, read_shard
from shipyard.checkpoint.verify import check_stored
from shipyard.errors import IntegrityError


@dataclass(frozen=True)
class Loaded:
    """A loaded checkpoint: the state as saved, and what the manifest says about it."""

    manifest: CheckpointManifest
    state: Any

    @property
    def step(self) -> int:
        return self.manifest.step

    @property
    def loader(self) -> dict[str, Any] | None:
        return self.manifest.loader

    def restore_rng(self, rank: int) -> None:
        """Set this process's RNGs to those rank `rank` had (rank 0's if it did not exist)."""
        states = self.manifest.rng
        restore_rng(states[rank] if rank < len(states) else states[0])


Batch = tuple[str, list[Piece], Mapping[str, torch.Tensor]]  # (source, its pieces, their data)


def assemble(manifest: CheckpointManifest, batches: Iterable[Batch]) -> Loaded:
    """Fill every tensor from `batches` of (source, pieces, their data by `Piece.key`)."""
    flat = {m.path: torch.empty(m.numel, dtype=m.dtype) for m in manifest.tensors}
    filled = 0
    for source, pieces, data in batches:
        for piece in pieces:
            target = flat[piece.path][piece.start : piece.stop]
            found = data.get(piece.key)
            # The manifest was validated, but the shard is only as good as its recorded hash.
            if found is None or found.dtype != target.dtype or found.shape != target.shape:
                raise IntegrityError(
                    f"{source}: piece {piece.key!r} is missing or not {target.dtype} "
                    f"of {target.numel()} elements, as the manifest of step {manifest.step} says"
                )
            target.copy_(found)
            filled += 1
    if filled != len(manifest.pieces):
        raise IntegrityError(f"checkpoint of step {manifest.step}: some pieces are missing")
    shaped = {m.path: flat[m.path].view(m.shape) for m in manifest.tensors}
    return Loaded(manifest, unflatten(manifest.skeleton, shaped))


def load_committed(checkpoint: Committed) -> Loaded:
    """Load `checkpoint` from storage, one shard at a time, verifying each shard's SHA-256.

    A shard that fails marks the checkpoint corrupt and raises `CorruptCheckpoint`."""
    manifest = checkpoint.manifest

    def batches() -> Iterable[Batch]:
        for shard in manifest.shards:
            path = shard_path(checkpoint.path, shard.file)
            data = read_shard(path)
            check_stored(checkpoint, shard, data, str(path))
            tensors = parse_safetensors(data, str(path))
            yield str(path), [p for p in manifest.pieces if p.rank == shard.rank], tensors

    return assemble(manifest, batches())
