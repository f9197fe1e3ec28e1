"""A real straggler rank is flagged after exactly k windows, then drained at a checkpoint."""

from pathlib import Path

from .conftest import events, make_config, train


def test_straggler_flagged_after_k_windows_and_drained(home: Path, token_data: Path):
    slow = {"kind": "straggler", "rank": 1, "step": 0}
    cfg = make_config(token_data, train={"steps": 40}, chaos={"faults": [slow]})
    run_id, state = train(cfg)
    assert state == "succeeded"
    (flagged,) = events(run_id, "straggler")
    # Windows of 5 steps, k = 3: slow from the first window, so flagged at window 2, never
    # sooner. (Exactly then in `test_units`; here a shared machine's steal time can blur a
    # window, which delays the flag: a false "fine" window, never a false alarm.)
    assert flagged["rank"] == 1 and 2 <= flagged["window"] <= 4
    assert flagged["ratio"] > 1.3
    (drain,) = events(run_id, "drain")
    # Drained at the next checkpoint (every 10 steps) committed after the flag; 40 steps leave
    # a checkpoint to drain at even when the flag comes late, at window 4.
    flagged_at = (flagged["window"] + 1) * 5
    assert drain["rank"] == 1 and drain["at_step"] % 10 == 0
    assert flagged_at <= drain["at_step"] <= flagged_at + 10
    assert events(run_id, "failure") == []  # a drain is planned, not a failure
    resumed = [e for e in events(run_id, "ready") if e["attempt"] == 1]
    assert {e["step"] for e in resumed} == {drain["at_step"]}
