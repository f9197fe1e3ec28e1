"""Trace loading and replay, including a slice of the real Philly trace (vendored in data/)."""

from pathlib import Path

import pytest

from shipyard.errors import InvalidInput
from shipyard.scheduler.experiments import simulate_trace
from shipyard.scheduler.trace import LimitModel, TraceJob, load_philly, load_vc_sizes

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"


def test_limits_are_seeded_noisy_overestimates() -> None:
    model = LimitModel(overestimate=4.0, seed=3)
    jobs = [TraceJob(row=r, submit=0.0, duration=1000.0, gpus=1, vc="x") for r in range(2000)]
    factors = [model(t) / t.duration for t in jobs]
    assert all(1.0 <= f < 4.0 for f in factors)  # never below the truth, never above k
    assert min(factors) < 1.05 and max(factors) > 3.8  # spread over the whole range
    # Log-uniform: half the draws fall below the geometric midpoint 2.
    assert 0.45 < sum(f < 2.0 for f in factors) / len(factors) < 0.55
    assert [model(t) for t in jobs[:50]] == [LimitModel(4.0, seed=3)(t) for t in jobs[:50]]
    assert model(jobs[0]) != LimitModel(4.0, seed=4)(jobs[0])
    assert model(TraceJob(row=1, submit=0.0, duration=1.0, gpus=1, vc="x")) == 60.0  # floor
    with pytest.raises(InvalidInput, match="overestimate must be ≥ 1"):
        LimitModel(overestimate=0.5)


def test_load_factor_divides_gaps(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-10-01 00:10:00,5,1,5,x\n"
        "2017-09-30 23:00:00,5,1,5,x\n"  # before the window: dropped
        "2017-10-01 00:00:00,5,2,10,x\n"
    )
    jobs = load_philly(trace, load_factor=4)
    assert [(j.submit, j.gpus) for j in jobs] == [(0.0, 2), (150.0, 1)]
    trace.write_text("timestamp,duration,num_gpus,gpu_time,cluster\nyesterday,5,1,5,x\n")
    with pytest.raises(InvalidInput, match="bad timestamp 'yesterday'"):
        load_philly(trace)


def test_philly_small_vcs_replay() -> None:
    vcs = {vc: n for vc, n in load_vc_sizes(TRACES / "philly_vc.csv").items() if n == 8}
    trace = load_philly(TRACES / "philly.csv", load_factor=4)
    reports = {p: simulate_trace(trace, vcs, p) for p in ("shipyard", "slurm-pooled", "slurm")}
    reports["fifo"] = simulate_trace(trace, vcs, "fifo")
    expected = sum(1 for t in trace if t.vc in vcs)
    for report in reports.values():
        assert report.jobs == expected and report.unfinished == 0
        assert 0 < report.utilization <= 1 and 0 < report.busy_fraction <= 1
    # Pooling the two VCs never makes FIFO + EASY worse on average here.
    assert reports["slurm-pooled"].avg_jct <= reports["slurm"].avg_jct
