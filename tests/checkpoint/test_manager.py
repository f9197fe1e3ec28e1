"""One-rank checkpoints: round trip, snapshot isolation, commit rule, corruption, retention."""

import random
import secrets
from pathlib import Path

import numpy as np
import pytest
import torch
from tests.checkpoint.conftest import state_hash, trained_state

from shipyard.checkpoint import (
    CheckpointManager,
    PeerMemory,
    Publish,
    Retention,
    committed,
    latest_committed,
)
from shipyard.errors import InvalidInput, StorageError
from shipyard.workspace import Workspace


def test_round_trip_is_bitwise_and_keeps_structure(tmp_path: Path) -> None:
    state = trained_state()
    manager = CheckpointManager(tmp_path, peer_memory=False)
    manager.save(5, state, loader={"step": 5}, blocking=True)
    loaded = manager.load()
    assert loaded.step == 5 and loaded.loader == {"step": 5}
    assert state_hash(loaded.state) == state_hash(state)
    assert set(loaded.state["optim"]["state"]) == set(state["optim"]["state"])  # int keys
    model = torch.nn.Sequential(
        torch.nn.Embedding(300, 32), torch.nn.Linear(32, 64), torch.nn.Linear(64, 7)
    )
    model.load_state_dict(loaded.state["model"])
    manager.close()


def test_steps_after_save_never_leak_into_it(tmp_path: Path) -> None:
    state = trained_state()
    expected = state_hash(state)
    manager = CheckpointManager(tmp_path)
    handle = manager.save(1, state)
    for tensor in state["model"].values():  # the trainer moves on at once
        tensor.add_(1)
    handle.result()
    assert state_hash(manager.load().state) == expected
    manager.close()


def test_settle_lets_a_save_in_flight_commit(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, peer_memory=False)
    assert manager.settle(0.0)  # nothing in flight
    manager.save(3, trained_state())
    assert manager.settle(60.0)
    found = manager.latest_committed()  # committed without waiting on the handle
    assert found is not None and found.manifest.step == 3
    manager.close()


def test_rng_states_restore_exactly(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, peer_memory=False)
    manager.save(1, {"x": torch.zeros(3)}, blocking=True)
    want = (random.random(), np.random.rand(), torch.rand(2).tolist())
    manager.load().restore_rng(0)
    assert (random.random(), np.random.rand(), torch.rand(2).tolist()) == want


def test_torn_checkpoint_is_never_latest(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, peer_memory=False, retention=Retention(keep_last=5))
    manager.save(1, trained_state(), blocking=True)
    manager.save(2, trained_state(1), blocking=True)
    (tmp_path / "step-0000000002" / "manifest.json").unlink()  # crash before the commit
    assert latest_committed(tmp_path).step == 1  # type: ignore[union-attr]
    shard = next((tmp_path / "step-0000000001").glob("*.safetensors"))
    shard.write_bytes(shard.read_bytes()[:-10])  # truncated shard: not whole
    assert latest_committed(tmp_path) is None


def test_retention_keeps_last_k_and_every_nth(tmp_path: Path) -> None:
    manager = CheckpointManager(
        tmp_path, peer_memory=False, retention=Retention(keep_last=2, keep_every=4)
    )
    for step in range(1, 10):
        manager.save(step, {"w": torch.full((4,), float(step))})
    manager.wait()
    assert [c.step for c in committed(tmp_path)] == [4, 8, 9]
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"step-{s:010d}" for s in (4, 8, 9)]
    assert manager.load(4).state["w"].tolist() == [4.0] * 4


def test_resaving_a_step_replaces_it(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, peer_memory=False)
    manager.save(7, {"w": torch.zeros(2)}, blocking=True)
    manager.save(7, {"w": torch.ones(2)}, blocking=True)
    assert manager.load(7).state["w"].tolist() == [1.0, 1.0]


def test_checkpoint_is_an_artifact_with_lineage(
    tmp_path: Path, shipyard_home: Path, workspace: Workspace
) -> None:
    data = tmp_path / "tokens"
    data.mkdir()
    (data / "a.tok").write_bytes(b"\x01\x00")
    dataset = workspace.put(data, "dataset", name="tokens")
    manager = CheckpointManager(
        tmp_path / "ckpt",
        publish_to=Publish(home=shipyard_home, inputs=["tokens"], alias="run-latest"),
        config={"lr": 0.1},
    )
    handle = manager.save(2, trained_state())
    artifact_id = handle.artifact_id
    manager.close()
    assert artifact_id is not None
    record = workspace.catalog.get_artifact(artifact_id)
    assert record is not None and record.kind == "checkpoint"
    assert record.metadata["step"] == 2 and record.metadata["config_hash"]
    assert workspace.resolve("run-latest") == artifact_id
    upstream = {edge.parent for edge in workspace.catalog.lineage(artifact_id, "up")}
    assert dataset.id in upstream
    restored = tmp_path / "restored"
    workspace.get(artifact_id, restored)
    assert latest_committed(tmp_path / "ckpt") is not None
    assert (restored / "manifest.json").is_file()


def test_failed_save_is_reported_and_leaves_the_last_commit(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, peer_memory=False)
    manager.save(1, {"w": torch.ones(3)}, blocking=True)
    (tmp_path / "step-0000000002").write_text("in the way")  # the directory cannot be made
    handle = manager.save(2, {"w": torch.zeros(3)})
    with pytest.raises(StorageError, match="not committed"):
        handle.result()
    with pytest.raises(InvalidInput, match="unsupported type"):
        manager.save(3, {"w": object()})
    assert latest_committed(tmp_path).step == 1  # type: ignore[union-attr]
    assert manager.load().state["w"].tolist() == [1.0, 1.0, 1.0]


def test_peer_memory_outlives_a_manager(tmp_path: Path) -> None:
    peer = PeerMemory(secrets.token_bytes(32))
    first = CheckpointManager(tmp_path, peer_memory=peer)
    first.save(6, trained_state(), blocking=True)
    first.close()  # e.g. the process group is re-formed after another rank was lost
    second = CheckpointManager(tmp_path / "other", peer_memory=peer)
    restored = second.restore_from_peers()
    assert restored.step == 6 and state_hash(restored.state) == state_hash(trained_state())
    second.close()
    peer.close()


def test_unreadable_manifest_and_leftovers(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, peer_memory=False, retention=Retention(keep_last=5))
    manager.save(1, {"w": torch.ones(2)}, blocking=True)
    manager.save(2, {"w": torch.ones(2)}, blocking=True)
    (tmp_path / "step-0000000002" / "manifest.json").write_text('{"format": 1, "step"')
    assert latest_committed(tmp_path).step == 1  # type: ignore[union-attr]
    leftover = tmp_path / "step-0000000000"  # a crashed save older than the newest commit
    leftover.mkdir()
    (leftover / "shard-00000-of-00001.safetensors").write_bytes(b"partial")
    manager.save(3, {"w": torch.ones(2)}, blocking=True)
    assert not leftover.exists()
    assert [c.step for c in committed(tmp_path)] == [1, 3]
