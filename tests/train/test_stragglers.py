"""A real straggler rank is flagged after k windows, then drained at a checkpoint."""

from pathlib import Path

from .conftest import events, make_config, train


def test_straggler_flagged_after_k_windows_and_drained(home: Path, token_data: Path):
    slow = {"kind": "straggler", "rank": 1, "step": 0}
    steps = 400
    cfg = make_config(token_data, train={"steps": steps}, chaos={"faults": [slow]})
    run_id, state = train(cfg)
    assert state == "succeeded"
    # The first flag is the injected straggler's. Later ones may follow: this machine's two
    # vCPUs differ by up to 1.5× in CPU time per step for seconds at a time (a healthy
    # replacement read 1.35-1.5× its peer for three windows, with forward passes of 5 ms and
    # of 18 ms alike), which the detector rightly sees as a straggler.
    flagged = events(run_id, "straggler")[0]
    # Windows of 5 steps, k = 3: slow from the first window, so flagged at window 2, never
    # sooner (exactly then in `test_units`). Later when spares were warming as the run began
    # (no window is judged meanwhile; one warm-up on a busy machine took 165 steps), or when
    # steal time blurred a window, which restarts the streak.
    assert flagged["rank"] == 1 and flagged["window"] >= 2
    assert flagged["ratio"] > 1.3
    drain = events(run_id, "drain")[0]
    # Drained at the next checkpoint (every 10 steps) committed after the flag. Commits are
    # asynchronous, so that may be the checkpoint of the last multiple of 10 before the flag,
    # whose commit landed after it.
    flagged_at = (flagged["window"] + 1) * 5
    assert flagged_at + 10 <= steps
    assert drain["rank"] == 1 and drain["at_step"] % 10 == 0
    assert flagged_at - 10 < drain["at_step"] <= flagged_at + 10
    assert events(run_id, "failure") == []  # a drain is planned, not a failure
    resumed = [e for e in events(run_id, "ready") if e["attempt"] == 1]
    assert {e["step"] for e in resumed} == {drain["at_step"]}
