"""A real straggler rank is flagged after exactly k windows, then drained at a checkpoint."""

from pathlib import Path

from .conftest import events, make_config, train


def test_straggler_flagged_after_k_windows_and_drained(home: Path, token_data: Path):
    slow = {"kind": "straggler", "rank": 1, "step": 0}
    # Two ranks: the healthy one reads as 1/1.5 of its peer, so a threshold nearer 1.0 than
    # the shared config's 1.3 cannot raise a false alarm, and leaves the slow rank's 1.5× a
    # wider margin over a shared machine's noise.
    controller = {"straggler_factor": 1.2}
    cfg = make_config(
        token_data, train={"steps": 80}, controller=controller, chaos={"faults": [slow]}
    )
    run_id, state = train(cfg)
    assert state == "succeeded"
    (flagged,) = events(run_id, "straggler")
    # Windows of 5 steps, k = 3: slow from the first window, so flagged at window 2, never
    # sooner. (Exactly then in `test_units`; here a shared machine's steal time can blur a
    # window, which restarts the streak and delays the flag: a false "fine" window, never a
    # false alarm. A clean CI machine once blurred enough of them to flag at window 8.)
    assert flagged["rank"] == 1 and 2 <= flagged["window"] <= 12
    assert flagged["ratio"] > 1.2
    (drain,) = events(run_id, "drain")
    # Drained at the next checkpoint (every 10 steps) committed after the flag. Commits are
    # asynchronous, so that may be the checkpoint of the last multiple of 10 before the flag,
    # whose commit landed after it. 80 steps leave one even when the flag comes at window 12.
    flagged_at = (flagged["window"] + 1) * 5
    assert drain["rank"] == 1 and drain["at_step"] % 10 == 0
    assert flagged_at - 10 < drain["at_step"] <= flagged_at + 10
    assert events(run_id, "failure") == []  # a drain is planned, not a failure
    resumed = [e for e in events(run_id, "ready") if e["attempt"] == 1]
    assert {e["step"] for e in resumed} == {drain["at_step"]}
