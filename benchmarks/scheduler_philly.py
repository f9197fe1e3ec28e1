"""Philly trace replay: the pooling gain and the policy gain, measured apart.

    .venv/bin/python benchmarks/scheduler_philly.py [--load-factor K] [--overestimate 4]
        [--seed 0] [--busy 0.7] [--sweep 6,8,10] [--data data]

1. Simulator check (load factor 1): the Helios rules (each VC alone, strict FIFO or SJF on the
   true durations) must give about 11,585 s and 11,543 s average JCT on this CSV.
2. Load factor: unless --load-factor is given, the smallest K on the grid 4, 4.5, 5, ... at which
   the pooled cluster under FIFO + EASY is at least --busy (70%) busy over the fixed window from
   the first to the last submission (arrival gaps divided by K).
3. Three arms at K, on the same jobs with the same user time limits (limit = duration × U, U
   log-uniform on [1, --overestimate], seeded per job; no arm sees a true duration):
   `partitioned` (FIFO + EASY, each VC its own partition), `pooled` (FIFO + EASY, one partition
   of every VC's nodes), `shipyard` (the same pooled nodes; each VC a team with its nodes as
   nominal quota, one cohort, shortest limit first, backfill, checkpoint-aware reclaim).
   Pooling gain = partitioned ÷ pooled average JCT; policy gain = pooled ÷ shipyard.
4. --sweep K1,K2,...: the pooled and shipyard arms again at other load factors.

Each arm reports average JCT split into true duration, wait before the first start, and the rest
(time lost to preemption: redone work and waiting again), Jain fairness over the teams' average
slowdowns, and the work preemption threw away (GPU-seconds).
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from shipyard.scheduler.experiments import simulate_trace
from shipyard.scheduler.metrics import Report
from shipyard.scheduler.trace import LimitModel, TraceJob, load_philly, load_vc_sizes

HELIOS_ON_THIS_CSV = {"fifo": 11585.0, "sjf": 11543.0}
ARMS = {"partitioned": "slurm", "pooled": "slurm-pooled", "shipyard": "shipyard"}
GOAL_POLICY_GAIN = 1.3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load-factor", type=float, help="K (default: the smallest ≥ --busy)")
    parser.add_argument("--overestimate", type=float, default=4.0, help="k of the limit model")
    parser.add_argument("--seed", type=int, default=0, help="seed of the limit draws")
    parser.add_argument("--busy", type=float, default=0.7, help="busy share K must reach")
    parser.add_argument("--sweep", default="", help="more load factors, comma-separated")
    parser.add_argument("--days", type=float, default=61, help="days of trace from 2017-10-01")
    default_data = Path(__file__).resolve().parents[1] / "data"
    parser.add_argument("--data", type=Path, default=default_data)
    args = parser.parse_args()
    traces = args.data / "traces"
    if not (traces / "philly.csv").exists():
        print(f"no trace at {traces}/philly.csv", file=sys.stderr)
        return 1
    started, cpu_started = time.perf_counter(), time.process_time()
    vcs = load_vc_sizes(traces / "philly_vc.csv")
    limits = LimitModel(overestimate=args.overestimate, seed=args.seed)

    def trace(factor: float) -> list[TraceJob]:
        return load_philly(traces / "philly.csv", days=args.days, load_factor=factor)

    result: dict[str, Any] = {"name": "scheduler_philly", "unit": "s avg JCT"}
    result["check"] = helios_check(trace(1.0), vcs)
    factor, searched = args.load_factor, []
    if factor is None:
        factor, searched = find_load(trace, vcs, limits, args.busy)
    jobs = trace(factor)
    floor = statistics.fmean(t.duration for t in jobs if t.vc in vcs)
    arms = {arm: simulate_trace(jobs, vcs, policy, limits) for arm, policy in ARMS.items()}
    for arm, report in arms.items():
        print(f"K={factor:g} {arm:<12} {line(report)}")
    pooling = arms["partitioned"].avg_jct / arms["pooled"].avg_jct
    policy = arms["pooled"].avg_jct / arms["shipyard"].avg_jct
    digests = {r.jobs_digest for r in arms.values()}
    result.update(
        load_factor=factor,
        load_search=searched,
        busy_target=args.busy,
        busy_window_s=list(arms["pooled"].busy_window),
        limits=limits.describe(),
        trace={
            "file": str(traces / "philly.csv"),
            "start": "2017-10-01",
            "days": args.days,
            "jobs": arms["pooled"].jobs,
            "avg_true_duration_s": round(floor, 1),
        },
        same_jobs=len(digests) == 1,
        arms={arm: figures(report, floor) for arm, report in arms.items()},
        pooling_gain=round(pooling, 4),
        policy_gain=round(policy, 4),
        # No policy can finish a job before its true duration: the most any could gain here.
        policy_gain_bound=round(arms["pooled"].avg_jct / floor, 4),
        fairness_no_worse=arms["shipyard"].jain_fairness >= arms["pooled"].jain_fairness,
        value=round(arms["shipyard"].avg_jct, 1),
        baseline=round(arms["pooled"].avg_jct, 1),
        ratio=round(policy, 4),
        goal_policy_gain=GOAL_POLICY_GAIN,
    )
    sweep = [float(k) for k in args.sweep.split(",") if k.strip()]
    result["sweep"] = [sweep_point(trace(k), vcs, limits, k) for k in sweep]
    result["seconds"] = round(time.perf_counter() - started, 1)
    result["cpu_seconds"] = round(time.process_time() - cpu_started, 1)
    print(
        f"K={factor:g} (pooled busy {arms['pooled'].busy_fraction:.1%}): pooling gain "
        f"{pooling:.3f}×, policy gain {policy:.3f}× (goal ≥ {GOAL_POLICY_GAIN}×; at most "
        f"{result['policy_gain_bound']:.3f}× above the true durations), Jain "
        f"{arms['shipyard'].jain_fairness:.3f} vs {arms['pooled'].jain_fairness:.3f}"
    )
    print(json.dumps(result))
    return 0


def helios_check(trace: list[TraceJob], vcs: dict[str, int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for order in ("fifo", "sjf"):
        report = simulate_trace(trace, vcs, order)
        error = report.avg_jct / HELIOS_ON_THIS_CSV[order] - 1
        print(f"check {order}: {report.jobs} jobs, avg JCT {report.avg_jct:.0f} s ({error:+.2%})")
        out[order] = {"avg_jct": round(report.avg_jct, 1), "error": round(error, 4)}
    return out


def find_load(
    trace: Any, vcs: dict[str, int], limits: LimitModel, busy: float
) -> tuple[float, list[dict[str, float]]]:
    """The smallest K on 4, 4.5, 5, ... (up to 16) at which pooled FIFO + EASY is `busy`."""
    searched = []
    factor = 4.0
    while factor <= 16:
        report = simulate_trace(trace(factor), vcs, "slurm-pooled", limits)
        searched.append({"load_factor": factor, "busy": round(report.busy_fraction, 4)})
        print(f"load factor {factor:g}: pooled FIFO + EASY busy {report.busy_fraction:.1%}")
        if report.busy_fraction >= busy:
            return factor, searched
        factor += 0.5
    raise SystemExit(f"no load factor up to 16 makes the pooled cluster {busy:.0%} busy")


def sweep_point(
    trace: list[TraceJob], vcs: dict[str, int], limits: LimitModel, factor: float
) -> dict[str, Any]:
    floor = statistics.fmean(t.duration for t in trace if t.vc in vcs)
    pooled = simulate_trace(trace, vcs, "slurm-pooled", limits)
    ours = simulate_trace(trace, vcs, "shipyard", limits)
    print(f"sweep K={factor:g} pooled   {line(pooled)}")
    print(f"sweep K={factor:g} shipyard {line(ours)}")
    return {
        "load_factor": factor,
        "pooled": figures(pooled, floor),
        "shipyard": figures(ours, floor),
        "policy_gain": round(pooled.avg_jct / ours.avg_jct, 4),
        "policy_gain_bound": round(pooled.avg_jct / floor, 4),
    }


def figures(report: Report, floor: float) -> dict[str, Any]:
    return {
        "jobs": report.jobs,
        "unfinished": report.unfinished,
        "jobs_digest": report.jobs_digest,
        "avg_jct_s": round(report.avg_jct, 1),
        "avg_true_duration_s": round(floor, 1),
        "avg_first_wait_s": round(report.avg_queue_delay, 1),
        "avg_preemption_delay_s": round(report.avg_jct - floor - report.avg_queue_delay, 1),
        "p99_jct_s": round(report.p99_jct, 1),
        "busy": round(report.busy_fraction, 4),
        "jain_fairness": round(report.jain_fairness, 4),
        "preemptions": report.preemptions,
        "lost_gpu_seconds": round(report.lost_gpu_hours * 3600, 1),
        "per_size": {
            str(gpus): {k: round(v, 1) for k, v in row.items()}
            for gpus, row in report.per_size.items()
        },
    }


def line(report: Report) -> str:
    return (
        f"avg JCT {report.avg_jct:.0f} s (first wait {report.avg_queue_delay:.0f} s), "
        f"busy {report.busy_fraction:.1%}, Jain {report.jain_fairness:.3f}, "
        f"{report.preemptions} preemptions, {report.lost_gpu_hours * 3600:.0f} GPU-s lost"
    )


if __name__ == "__main__":
    sys.exit(main())
