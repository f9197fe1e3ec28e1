"""Verified recovery: a corrupt checkpoint is named (file and piece), marked, and passed over."""

import json
from pathlib import Path

import pytest
import torch
from tests.checkpoint.conftest import state_hash, trained_state

from shipyard.checkpoint import (
    CheckpointManager,
    CorruptCheckpoint,
    corrupt_marks,
    latest_committed,
    load_committed,
)
from shipyard.checkpoint.corrupt import CORRUPT
from shipyard.checkpoint.manifest import MANIFEST, CheckpointManifest, seal, step_dir
from shipyard.checkpoint.verify import HEADER, rank_pieces
from shipyard.errors import IntegrityError, InvalidInput, NotFound


def _flip(path: Path, offset: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0x10  # one bit, same size
    path.write_bytes(bytes(raw))


def _piece_at(root: Path, step: int, offset: int) -> str:
    """The key of the piece holding byte `offset` of step `step`'s (only) shard."""
    found = latest_committed(root, verify=False)
    assert found is not None and found.step == step
    manifest = found.manifest
    shard = manifest.shards[0]
    dtypes = {t.path: t.dtype for t in manifest.tensors}
    end = shard.digest.size
    for piece in reversed(rank_pieces(manifest, shard.rank)):  # the data ends at the file's end
        start = end - (piece.stop - piece.start) * dtypes[piece.path].itemsize
        if start <= offset < end:
            return piece.key
        end = start
    return HEADER


def _two_steps(root: Path) -> tuple[CheckpointManager, dict[int, str]]:
    manager = CheckpointManager(root, peer_memory=False)
    hashes = {}
    for step in (1, 2):
        state = trained_state(seed=step)
        manager.save(step, state, blocking=True)
        hashes[step] = state_hash(state)
    return manager, hashes


@pytest.mark.parametrize("where", ["data", "header"])
def test_corrupt_newest_is_named_marked_and_passed_over(tmp_path: Path, where: str) -> None:
    manager, hashes = _two_steps(tmp_path)
    shard = next(step_dir(tmp_path, 2).glob("*.safetensors"))
    offset = shard.stat().st_size * 2 // 3 if where == "data" else 20
    expected_piece = _piece_at(tmp_path, 2, offset)
    assert (expected_piece == HEADER) == (where == "header")
    _flip(shard, offset)

    assert latest_committed(tmp_path, verify=False).step == 2  # type: ignore[union-attr]
    seen: list[CorruptCheckpoint] = []
    loaded = manager.load(on_corrupt=seen.append)
    assert loaded.step == 1 and state_hash(loaded.state) == hashes[1]
    (error,) = seen
    assert error.step == 2 and error.source == str(shard.resolve())
    assert error.piece == expected_piece

    # The mark names the same, and keeps the checkpoint from being tried again, by anyone.
    (mark,) = corrupt_marks(tmp_path)
    assert mark["step"] == 2 and mark["piece"] == expected_piece and mark["file"] == error.source
    assert latest_committed(tmp_path, verify=False).step == 1  # type: ignore[union-attr]
    assert latest_committed(tmp_path).step == 1  # type: ignore[union-attr]
    seen.clear()
    assert manager.load(on_corrupt=seen.append).step == 1 and seen == []

    # A re-save of step 2 replaces the bad bytes and lifts the mark.
    manager.save(2, trained_state(seed=2), blocking=True)
    assert not (step_dir(tmp_path, 2) / CORRUPT).exists()
    assert state_hash(manager.load().state) == hashes[2]
    manager.close()


def test_latest_committed_checks_hashes_not_sizes(tmp_path: Path) -> None:
    manager, _ = _two_steps(tmp_path)
    manager.close()
    shard = next(step_dir(tmp_path, 2).glob("*.safetensors"))
    _flip(shard, shard.stat().st_size - 1)
    found = latest_committed(tmp_path)
    assert found is not None and found.step == 1
    assert (step_dir(tmp_path, 2) / CORRUPT).exists()
    with pytest.raises(IntegrityError, match="marked corrupt"):  # asked for: refused, not swapped
        CheckpointManager(tmp_path, peer_memory=False).load(2)


def test_nothing_verifies_is_not_found(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, peer_memory=False)
    manager.save(1, {"w": torch.arange(100.0)}, blocking=True)
    shard = next(step_dir(tmp_path, 1).glob("*.safetensors"))
    _flip(shard, shard.stat().st_size - 8)
    with pytest.raises(NotFound, match="verifies"):
        manager.load()
    assert latest_committed(tmp_path) is None
    manager.close()


def test_peer_restore_is_checked_against_the_manifest(tmp_path: Path) -> None:
    state = trained_state()
    manager = CheckpointManager(tmp_path, peer_memory=True)
    manager.save(3, state, blocking=True)
    stored = latest_committed(tmp_path)
    assert stored is not None and manager.peer is not None
    restored = manager.restore_from_peers(manifest=stored.manifest)
    assert state_hash(restored.state) == state_hash(state)

    # The peer now serves rank 0's snapshot with one bit flipped, first byte of its 2nd piece.
    blob = bytearray(b"".join(bytes(v) for v in manager.peer._held[(3, 0)]))
    first, second = rank_pieces(stored.manifest, 0)[:2]
    dtypes = {t.path: t.dtype for t in stored.manifest.tensors}
    blob[(first.stop - first.start) * dtypes[first.path].itemsize] ^= 1
    manager.peer.hold(3, 0, [memoryview(blob)])
    with pytest.raises(CorruptCheckpoint) as caught:
        manager.restore_from_peers(manifest=stored.manifest)
    assert caught.value.piece == second.key
    assert "peer snapshot of rank 0" in caught.value.source
    with pytest.raises(CorruptCheckpoint):  # against the peer's own copy of the manifest too
        manager.restore_from_peers(3)
    assert load_committed(stored).step == 3  # storage is untouched and still good
    manager.close()


def test_manifest_crc_list_must_match_the_pieces(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, peer_memory=False)
    manager.save(1, {"w": torch.arange(10.0), "b": torch.zeros(3)}, blocking=True)
    manager.close()
    path = step_dir(tmp_path, 1) / MANIFEST
    data = json.loads(path.read_bytes())
    assert len(data["shards"][0]["crc32"]) == 2
    data["shards"][0]["crc32"] = [1]
    with pytest.raises(InvalidInput, match=r"shards\[0\]\.crc32"):
        CheckpointManifest.from_json(json.dumps(data).encode(), str(path))
    data["shards"][0]["crc32"] = [1, 1 << 32]
    with pytest.raises(InvalidInput, match=r"crc32\[1\]"):
        CheckpointManifest.from_json(json.dumps(data).encode(), str(path))
    del data["shards"][0]["crc32"]  # a manifest from before per-piece checksums still loads
    assert CheckpointManifest.from_json(seal(data), str(path)).step == 1
