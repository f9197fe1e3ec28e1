"""Goodput under injected failures, against the first-order model's optimum at the Young/Daly τ*.

A 2-rank run of the small GPT under the `shipyard.train` controller, its chaos killing or hanging
a random rank with mean time between failures `--mtbf` s (a scaled-down MTBF: a 16k-GPU job sees
one every ~3 hours), checkpoint interval automatic (τ* = √(2CM) from the measured stall C and the
MTBF M). After `--duration` s the run is stopped and its goodput (productive step time ÷ wall
time, after the run's one-time cold start, which the model has no term for; the goodput including
it is printed too) is compared with the model's: 1 − C/τ* − (τ*/2 + R)/M, where R is the measured
mean restart cost (detection + restart) per failure. The machine is shared: figures vary.

    .venv/bin/python benchmarks/goodput.py [--mtbf 60] [--duration 300]
"""

import argparse
import csv
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mtbf", type=float, default=60.0)
    parser.add_argument("--duration", type=float, default=300.0)
    parser.add_argument("--kinds", default="kill,hang", help="fault kinds to inject")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="goodput-") as tmp:
        work = Path(tmp)
        os.environ["SHIPYARD_HOME"] = str(work / "home")
        from shipyard.loader import TokenDatasetWriter
        from shipyard.train import Controller, RunTable, TrainConfig, create_run, report

        rng = np.random.default_rng(0)
        with TokenDatasetWriter(work / "tokens", 256, shard_tokens=1 << 16) as writer:
            for _ in range(500):
                writer.add(rng.integers(0, 256, size=int(rng.integers(20, 200))))
        cfg = TrainConfig.from_dict(
            {
                "data": {"path": str(work / "tokens"), "global_batch": 8},
                "model": {"vocab_size": 256, "d_model": 64, "n_layers": 2, "n_heads": 2},
                "train": {"steps": 10_000_000, "checkpoint_every": 0},
                "controller": {
                    "max_failures": 1000,
                    "mtbf_prior_s": args.mtbf,
                    "hang_min_s": 2.0,
                    "straggler_factor": 10.0,  # stragglers are another benchmark's business
                },
                "chaos": {"mtbf_s": args.mtbf, "kinds": args.kinds.split(","), "seed": 3},
            }
        )
        run_id = create_run(cfg, 2)
        started = time.monotonic()
        Controller(run_id, say=lambda line: print(line, file=sys.stderr)).run_to_end(
            stop=lambda: time.monotonic() - started > args.duration
        )
        table = RunTable()
        try:
            run = table.get(run_id)
            info = report(run, table)
        finally:
            table.close()
        # The one-time cold start (imports, first rendezvous): the model has no term for it.
        with open(Path(run.run_dir) / "steps.csv") as rows:
            first = next(csv.DictReader(rows))
        startup = float(first["at"]) - float(first["step_time"]) - run.started_at
    parts = info["breakdown"]
    failures = max(1, info["failures"])
    restart = (parts["restart"] + parts["detection"]) / failures
    stall = info["checkpoint"]["stall_s"]
    tau = (2 * stall * args.mtbf) ** 0.5
    optimum = max(0.0, 1 - stall / tau - (tau / 2 + restart) / args.mtbf) if tau else 0.0
    steady = parts["productive"] / (parts["wall"] - startup)
    print(json.dumps({"breakdown": parts, "checkpoint": info["checkpoint"]}, indent=1))
    print(
        json.dumps(
            {
                "name": "goodput",
                "value": steady,  # after the first start-up, as in the model
                "unit": "fraction",
                "baseline": optimum,
                "ratio": steady / optimum if optimum else None,
                "goodput_with_startup": parts["goodput"],
                "startup_s": startup,
                "mtbf_s": args.mtbf,
                "duration_s": args.duration,
                "failures": info["failures"],
                "failures_by_kind": info["failures_by_kind"],
                "checkpoint_stall_s": stall,
                "young_daly_s": tau,
                "mean_restart_s": restart,
            }
        )
    )


if __name__ == "__main__":
    main()
