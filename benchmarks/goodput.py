"""Goodput under injected failures, against the model's optimum for the MTBF actually observed.

A 2-rank run of the small GPT under the `shipyard.train` controller, its chaos killing or hanging
a random rank with a mean gap of `--mtbf` s of training (a scaled-down MTBF: a 16k-GPU job sees one
every ~3 hours), checkpoint interval automatic (τ* = √(2CM) from the measured stall C and the
observed MTBF M). The run is stopped at its (`--failures` + 1)-th failure. The figure is taken over
the `--failures` renewal cycles after the first one (each: restart, training, failure; the first
cycle, with the cold start the model has no term for, is left out):

    goodput = Σ productive step time ÷ Σ wall time           (kept steps only, from steps.csv)
    optimum = 1 − C/τ* − (τ*/2 + R)/M,  τ* = √(2CM)            (first-order Young/Daly model)

with M = Σ wall ÷ failures (observed), C the median checkpoint stall and R the mean cost of a
failure besides lost work (fault → detection → the next attempt's first step), all measured in the
same cycles. The 95% interval of goodput ÷ optimum comes from a bootstrap over cycles (they are
independent renewals). The machine is shared: figures vary from run to run.

    .venv/bin/python benchmarks/goodput.py [--mtbf 5] [--failures 20] [--kinds kill,hang]
"""

import argparse
import csv
import itertools
import json
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Cycle:
    """From one failure's detection to the next: a restart, training, a failure."""

    wall: float
    productive: float
    restart: float  # the failure before it: detection → this attempt's first step
    detection: float  # the failure that ends it: fault → detection (a hang's threshold)
    lost: float  # steps after the last commit, redone by the next attempt
    stalls: tuple[float, ...]


def model_ratio(cycles: list[Cycle]) -> dict[str, float]:
    from shipyard.train import model_goodput, young_daly

    wall = sum(c.wall for c in cycles)
    goodput = sum(c.productive for c in cycles) / wall
    mtbf = wall / len(cycles)
    stalls = [s for c in cycles for s in c.stalls]
    stall = statistics.median(stalls) if stalls else 0.0
    restart = statistics.fmean(c.restart + c.detection for c in cycles)
    tau = young_daly(stall, mtbf)
    optimum = model_goodput(stall, mtbf, restart, tau)
    return {
        "goodput": goodput,
        "optimum": optimum,
        "ratio": goodput / optimum if optimum else float("nan"),
        "mtbf_s": mtbf,
        "stall_s": stall,
        "restart_s": restart,
        "young_daly_s": tau,
    }


def cycles_of(run_dir: Path, failures: list[tuple[float, int, int, float]]) -> list[Cycle]:
    """`failures`: (detected at, attempt, committed step, detection delay) in order."""
    rows: dict[int, list[dict[str, str]]] = {}
    with open(run_dir / "steps.csv") as table:
        for row in csv.DictReader(table):
            if row["rank"] == "0":
                rows.setdefault(int(row["attempt"]), []).append(row)
    cycles = []
    for (start, *_), (end, attempt, committed, detection) in itertools.pairwise(failures):
        mine = rows.get(attempt, [])
        kept = [r for r in mine if int(r["step"]) <= committed]
        first = float(mine[0]["at"]) - float(mine[0]["step_time"]) if mine else end
        cycles.append(
            Cycle(
                wall=end - start,
                productive=sum(
                    float(r["step_time"]) - float(r["data_wait"]) - float(r["stall"]) for r in kept
                ),
                restart=first - start,
                detection=detection,
                lost=sum(float(r["step_time"]) for r in mine if int(r["step"]) > committed),
                stalls=tuple(float(r["stall"]) for r in mine if float(r["stall"]) > 0),
            )
        )
    return cycles


def bootstrap(cycles: list[Cycle], draws: int, seed: int) -> tuple[float, float]:
    rng = random.Random(seed)
    ratios = [model_ratio(rng.choices(cycles, k=len(cycles)))["ratio"] for _ in range(draws)]
    low, high = np.percentile(ratios, [2.5, 97.5])
    return float(low), float(high)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mtbf", type=float, default=5.0, help="mean s of training per fault")
    parser.add_argument("--failures", type=int, default=20, help="cycles measured")
    parser.add_argument("--kinds", default="kill,hang", help="fault kinds to inject")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--spares", type=int, default=4, help="sets of warm spares")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="goodput-", ignore_cleanup_errors=True) as tmp:
        work = Path(tmp)
        os.environ["SHIPYARD_HOME"] = str(work / "home")
        from shipyard.loader import TokenDatasetWriter
        from shipyard.train import Controller, RunTable, TrainConfig, create_run

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
                    "max_failures": 10 * args.failures,
                    "mtbf_prior_s": args.mtbf,
                    "hang_min_s": 2.0,
                    "straggler_factor": 10.0,  # stragglers are another benchmark's business
                    # The MTBF is scaled down ~1000×, a spare's warm-up (seconds) is not: more
                    # sets keep failures from outpacing it, as one set does at a real MTBF.
                    "spares": args.spares,
                },
                "chaos": {"mtbf_s": args.mtbf, "kinds": args.kinds.split(","), "seed": args.seed},
            }
        )
        run_id = create_run(cfg, 2)
        table = RunTable()
        checked = [0.0]

        def enough() -> bool:
            if time.monotonic() - checked[0] < 0.5:
                return False
            checked[0] = time.monotonic()
            return len(table.events(run_id, "failure")) > args.failures

        Controller(run_id, say=lambda line: print(line, file=sys.stderr)).run_to_end(stop=enough)
        run = table.get(run_id)
        failures = [
            (
                e.at,
                int(e.detail["attempt"]),
                int(e.detail["committed"]),
                float(e.detail["detection_s"]),
            )
            for e in table.events(run_id, "failure")
        ][: args.failures + 1]
        by_kind = [e.detail["kind"] for e in table.events(run_id, "failure")]
        table.close()
        cycles = cycles_of(Path(run.run_dir), failures)
    figure = model_ratio(cycles)
    low, high = bootstrap(cycles, 2000, args.seed)
    print(json.dumps({"cycles": [c.__dict__ for c in cycles]}), file=sys.stderr)
    print(
        json.dumps(
            {
                "name": "goodput",
                "value": figure["goodput"],
                "unit": "fraction",
                "baseline": figure["optimum"],  # the model's optimum at the observed MTBF
                "ratio": figure["ratio"],
                "ratio_ci95": [low, high],
                "failures": len(cycles),
                "failures_by_kind": {k: by_kind.count(k) for k in sorted(set(by_kind))},
                "mtbf_observed_s": figure["mtbf_s"],
                "mtbf_injected_s": args.mtbf,
                "checkpoint_stall_s": figure["stall_s"],
                "mean_restart_s": figure["restart_s"],
                "young_daly_s": figure["young_daly_s"],
            }
        )
    )


if __name__ == "__main__":
    main()
