"""Kill, hang and NaN faults on real gloo ranks: detection, restart, rollback, exact resume."""

import hashlib
import json
from pathlib import Path

import pytest

from shipyard.checkpoint import latest_committed
from shipyard.train import RunTable
from shipyard.workspace import Workspace

from .conftest import events, final_losses, make_config, run_dir, train


def model_digest(run_id: str) -> str:
    return hashlib.sha256(
        (run_dir(run_id) / "model" / "model.safetensors").read_bytes()
    ).hexdigest()


@pytest.fixture(scope="module")
def baseline(home: Path, token_data: Path) -> str:
    """An uninterrupted run of the default test config."""
    run_id, state = train(make_config(token_data, alias="tiny-gpt"))
    assert state == "succeeded"
    return run_id


def test_uninterrupted_run_registers_model_without_false_alarms(baseline: str):
    run_id = baseline
    assert events(run_id, "failure") == []
    assert events(run_id, "straggler") == []  # a healthy run of 8 windows: no false alarm
    ws = Workspace.open()
    try:
        model = ws.catalog.get_artifact(ws.resolve("tiny-gpt"))
        assert model is not None and model.kind == "model"
        assert model.run_id is None or model.run_id == run_id
        run = ws.catalog.get_run(run_id)
        assert run is not None and run.status == "succeeded" and model.id in run.outputs
    finally:
        ws.close()


def test_kill_then_hang_resume_bit_identical(baseline: str, token_data: Path):
    faults = [
        {"kind": "kill", "rank": 1, "step": 15, "attempt": 0},
        {"kind": "hang", "rank": 1, "step": 25, "attempt": 1},
    ]
    run_id, state = train(make_config(token_data, chaos={"faults": faults}))
    assert state == "succeeded"
    kinds = [f["kind"] for f in events(run_id, "failure")]
    assert kinds == ["crash", "hang"]

    (hang,) = events(run_id, "hang")
    assert hang["missing"] == [1]  # rank 1 never entered the collective rank 0 waits in
    assert hang["pending"] == [25, 0]
    assert hang["stalled_s"] <= hang["threshold_s"] + hang["heartbeat_s"]
    assert "stop_progressing" in hang["stacks"]["1"]  # the hung rank's Python stack
    assert "stop_progressing" not in hang["stacks"]["0"]

    # The hang's survivors held checkpoint 20 in memory: the next attempt restored from them.
    ready = [e for e in events(run_id, "ready") if e["attempt"] == 2]
    assert {e["restored_from"] for e in ready} == {"peers"}
    assert {e["step"] for e in ready} == {20}

    assert final_losses(run_id) == final_losses(baseline)
    assert model_digest(run_id) == model_digest(baseline)


def test_nan_rolls_back_and_skips_the_window(home: Path, token_data: Path):
    poison = {"kind": "nan", "rank": 0, "data_step": 13}
    cfg = make_config(token_data, train={"steps": 30}, chaos={"faults": [poison]})
    run_id, state = train(cfg)
    assert state == "succeeded"  # without the skip, step 13 would fail on every attempt
    assert [f["kind"] for f in events(run_id, "failure")] == ["anomaly"]
    (rollback,) = events(run_id, "rollback")
    assert rollback["skip"] == [13, 14] and rollback["to_step"] == 10
    losses = final_losses(run_id)
    assert sorted(losses) == list(range(1, 31)) and "nan" not in losses.values()

    final = latest_committed(run_dir(run_id) / "checkpoints")
    assert final is not None and final.manifest.loader is not None
    assert final.manifest.loader["spec"]["skip"] == [[13, 14]]
    assert final.manifest.loader["data_step"] == 31  # 30 steps + 1 skipped data step
    table = RunTable()
    try:
        model_id = table.get(run_id).model_id
    finally:
        table.close()
    ws = Workspace.open()
    try:
        artifact = ws.catalog.get_artifact(model_id)
        assert artifact is not None and artifact.metadata["skip_windows"] == [[13, 14]]
    finally:
        ws.close()
    assert json.loads((run_dir(run_id) / "anomaly-attempt-0.json").read_text())["data_step"] == 13


def test_corrupt_newest_checkpoint_every_rank_killed_recovers_from_the_one_before(
    baseline: str, token_data: Path
):
    # At step 25 rank 0 flips one bit of its shard of checkpoint 20, then every rank dies.
    faults = [
        {"kind": "corrupt", "rank": 0, "step": 25, "attempt": 0},
        {"kind": "kill", "rank": 0, "step": 25, "attempt": 0},
        {"kind": "kill", "rank": 1, "step": 25, "attempt": 0},
    ]
    run_id, state = train(make_config(token_data, chaos={"faults": faults}))
    assert state == "succeeded"
    assert [f["kind"] for f in events(run_id, "failure")] == ["crash"]  # one, not a retry loop

    # The corrupt checkpoint is named down to the file and piece, and was not loaded.
    (corrupt,) = events(run_id, "corrupt-checkpoint")
    assert corrupt["step"] == 20 and corrupt["attempt"] == 1
    assert corrupt["file"].endswith("step-0000000020/shard-00000-of-00002.safetensors")
    assert "@" in corrupt["piece"]  # a piece of a tensor ("<path>@<start>"), not the header
    ready = [e for e in events(run_id, "ready") if e["attempt"] == 1]
    assert {e["step"] for e in ready} == {10}
    assert {e["restored_from"] for e in ready} == {"storage"}

    # Resumed from step 10: the same losses, bit for bit, as the clean run from that step on.
    losses, clean = final_losses(run_id), final_losses(baseline)
    assert sorted(losses) == list(range(1, 41))
    assert {s: losses[s] for s in range(11, 41)} == {s: clean[s] for s in range(11, 41)}
    assert model_digest(run_id) == model_digest(baseline)
    # Step 20 was saved again, whole: the mark went with the bad bytes.
    assert not (run_dir(run_id) / "checkpoints" / "step-0000000020" / "corrupt.json").exists()


def test_a_manifest_that_lies_about_its_step_is_refused_and_reported(
    baseline: str, token_data: Path
):
    # At step 25 rank 0 flips the lowest bit of checkpoint 20's step (it reads 21), then every
    # rank dies. Believed, the run would resume at "21" with step 20's weights and skip a step.
    faults = [
        {"kind": "corrupt-manifest", "rank": 0, "step": 25, "attempt": 0},
        {"kind": "kill", "rank": 0, "step": 25, "attempt": 0},
        {"kind": "kill", "rank": 1, "step": 25, "attempt": 0},
    ]
    run_id, state = train(make_config(token_data, chaos={"faults": faults}))
    assert state == "succeeded"
    assert [f["kind"] for f in events(run_id, "failure")] == ["crash"]

    (corrupt,) = events(run_id, "corrupt-checkpoint")
    assert corrupt["step"] == 20 and corrupt["reason"] == "manifest-digest"
    assert corrupt["file"].endswith("step-0000000020/manifest.json")
    ready = [e for e in events(run_id, "ready") if e["attempt"] == 1]
    assert {e["step"] for e in ready} == {10}  # the step it actually resumed from
    assert {e["restored_from"] for e in ready} == {"storage"}

    losses, clean = final_losses(run_id), final_losses(baseline)
    assert sorted(losses) == list(range(1, 41))
    assert {s: losses[s] for s in range(11, 41)} == {s: clean[s] for s in range(11, 41)}
    assert model_digest(run_id) == model_digest(baseline)
