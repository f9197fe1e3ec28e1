"""Trace loading and replay, including a slice of the real Philly trace (vendored in data/)."""

from pathlib import Path

import pytest

from shipyard.errors import InvalidInput
from shipyard.scheduler.experiments import simulate_trace
from shipyard.scheduler.trace import declared_limit, load_philly, load_vc_sizes

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"


def test_declared_limits_are_power_of_two_hours_capped() -> None:
    assert declared_limit(10) == 3600
    assert declared_limit(3601) == 7200
    assert declared_limit(5 * 3600) == 8 * 3600
    assert declared_limit(30 * 86400) == 7 * 86400


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
    ours = simulate_trace(trace, vcs, "shipyard")
    slurm = simulate_trace(trace, vcs, "slurm")
    fifo = simulate_trace(trace, vcs, "fifo")
    expected = sum(1 for t in trace if t.vc in vcs)
    for report in (ours, slurm, fifo):
        assert report.jobs == expected and report.unfinished == 0
    assert ours.avg_jct <= slurm.avg_jct
    assert all(0 < r.utilization <= 1 for r in (ours, slurm, fifo))
