"""Replay the Philly trace: the Helios simulator check, then Shipyard vs a Slurm-like baseline.

    .venv/bin/python benchmarks/scheduler_philly.py [--load-factor 4] [--data data]

Simulator check (load factor 1): strict FIFO and SJF per VC must give about 11,585 s and
11,543 s average JCT. Policy comparison at the chosen load factor (default 4): Shipyard's policy
against FIFO + EASY backfill per VC, both on declared limits. Also checks K = 1 (no worse).
"""

import argparse
import json
import sys
import time
from pathlib import Path

from shipyard.scheduler.experiments import simulate_trace
from shipyard.scheduler.trace import load_philly, load_vc_sizes

HELIOS_ON_THIS_CSV = {"fifo": 11585.0, "sjf": 11543.0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load-factor", type=float, default=4.0)
    default_data = Path(__file__).resolve().parents[1] / "data"
    parser.add_argument("--data", type=Path, default=default_data)
    args = parser.parse_args()
    traces = args.data / "traces"
    if not (traces / "philly.csv").exists():
        print(f"no trace at {traces}/philly.csv", file=sys.stderr)
        return 1
    vcs = load_vc_sizes(traces / "philly_vc.csv")
    base = load_philly(traces / "philly.csv")
    result: dict[str, object] = {"name": "scheduler_philly", "unit": "s avg JCT"}
    started, cpu_started = time.perf_counter(), time.process_time()
    for order in ("fifo", "sjf"):
        report = simulate_trace(base, vcs, order)
        error = report.avg_jct / HELIOS_ON_THIS_CSV[order] - 1
        print(f"check {order}: {report.jobs} jobs, avg JCT {report.avg_jct:.0f} s ({error:+.2%})")
        result[f"{order}_avg_jct"] = round(report.avg_jct, 1)
        result[f"{order}_error"] = round(error, 4)
    for factor in sorted({1.0, args.load_factor}):
        trace = base if factor == 1.0 else load_philly(traces / "philly.csv", load_factor=factor)
        ours = simulate_trace(trace, vcs, "shipyard")
        slurm = simulate_trace(trace, vcs, "slurm")
        ratio = slurm.avg_jct / ours.avg_jct
        print(
            f"K={factor:g}: shipyard {ours.avg_jct:.0f} s (util {ours.utilization:.3f}, "
            f"{ours.preemptions} preemptions, {ours.lost_gpu_hours:.1f} GPU-h lost), "
            f"slurm-like {slurm.avg_jct:.0f} s (util {slurm.utilization:.3f}): {ratio:.2f}×"
        )
        tag = "" if factor == args.load_factor else f"_k{factor:g}"
        result[f"value{tag}"] = round(ours.avg_jct, 1)
        result[f"baseline{tag}"] = round(slurm.avg_jct, 1)
        result[f"ratio{tag}"] = round(ratio, 3)
        result[f"utilization{tag}"] = round(ours.utilization, 4)
        result[f"baseline_utilization{tag}"] = round(slurm.utilization, 4)
        result[f"p99_jct{tag}"] = round(ours.p99_jct, 1)
        result[f"baseline_p99_jct{tag}"] = round(slurm.p99_jct, 1)
    result["load_factor"] = args.load_factor
    result["seconds"] = round(time.perf_counter() - started, 1)
    result["cpu_seconds"] = round(time.process_time() - cpu_started, 1)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
