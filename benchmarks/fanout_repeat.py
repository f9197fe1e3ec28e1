"""Run Shipyard's swarm of `fanout.py` several times and report the median: single runs on
the 2-core rig spread by about ±0.03 × S/B, more than many of the changes one wants to judge.
Runs go one after another, with a pause between them so that the previous run's processes are
gone before the next one starts (needs root, as `fanout.py` does). The first run also measures
`fanout.py`'s baselines (origin-only, and aria2 unless `--no-aria2`); the others pass
`--no-baseline`.

    sudo .venv/bin/python benchmarks/fanout_repeat.py [--runs 5] [--pause 10] [fanout.py flags]

Last line: one JSON object: value = the median of the runs' T_shipyard / (S/B), values = every
run's, baseline = the first run's T_origin / (S/B), ratio = baseline / value, and the medians of
the runs' origin bytes, machine CPU busy share, daemon CPU per host and its event-loop part.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

FANOUT = Path(__file__).with_name("fanout.py")
MEDIANS = (
    "origin_bytes_ratio",
    "machine_cpu_busy",
    "swarm_cpu_s_per_host",
    "swarm_cpu_loop_s_per_host",
)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--pause", type=float, default=10.0, help="seconds between runs")
    args, fanout_flags = p.parse_known_args()
    if args.runs < 1:
        p.error("--runs must be at least 1")
    results = []
    for run in range(args.runs):
        if run:
            time.sleep(args.pause)
        baselines = [] if run == 0 else ["--no-baseline"]
        done = subprocess.run(
            [sys.executable, str(FANOUT), *baselines, *fanout_flags],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"run {run + 1} failed:\n{done.stderr[-3000:]}")
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"run {run + 1}/{args.runs}: {results[-1]['value']} x S/B", file=sys.stderr)
    values = [float(r["value"]) for r in results]
    summary: dict[str, object] = {
        "name": "fanout_repeat",
        "value": round(statistics.median(values), 3),
        "unit": "x S/B",
        "values": values,
        **_baselines(results[0], statistics.median(values)),
        "runs": args.runs,
        "hosts": results[0]["hosts"],
        "rate_mbit": results[0]["rate_mbit"],
        "size_mib": results[0]["size_mib"],
    }
    for key in MEDIANS:
        summary[key] = round(statistics.median(float(r[key]) for r in results), 3)
    print(json.dumps(summary))


def _baselines(first: dict[str, object], median: float) -> dict[str, object]:
    """The first run's baselines, and the speed-up of the median over origin-only."""
    if "baseline" not in first:  # the caller passed --no-baseline
        return {}
    baseline = float(str(first["baseline"]))
    found = {"baseline": baseline, "ratio": round(baseline / median, 3)}
    return found | {k: first[k] for k in ("aria2_baseline",) if k in first}


if __name__ == "__main__":
    main()
