"""A real straggler rank is flagged after exactly k windows, then drained at a checkpoint."""

from pathlib import Path

from .conftest import events, make_config, train


def test_straggler_flagged_after_k_windows_and_drained(home: Path, token_data: Path):
    slow = {"kind": "straggler", "rank": 1, "step": 0}
    cfg = make_config(token_data, train={"steps": 30}, chaos={"faults": [slow]})
    run_id, state = train(cfg)
    assert state == "succeeded"
    flagged = events(run_id, "straggler")
    # Windows of 5 steps, k = 3: slow from the first window, so flagged at window 2, once.
    assert [(f["rank"], f["window"]) for f in flagged] == [(1, 2)]
    assert flagged[0]["ratio"] > 1.3
    (drain,) = events(run_id, "drain")
    assert drain["rank"] == 1 and drain["at_step"] == 20  # the first checkpoint after the flag
    assert events(run_id, "failure") == []  # a drain is planned, not a failure
    resumed = [e for e in events(run_id, "ready") if e["attempt"] == 1]
    assert {e["step"] for e in resumed} == {20}
