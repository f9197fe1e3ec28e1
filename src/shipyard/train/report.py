"""What `shipyard train status` and `report` print, and the controller's Prometheus samples."""

import statistics
import time
from collections import Counter
from typing import Any

from shipyard.train.config import TrainConfig
from shipyard.train.goodput import Ledger, model_goodput, young_daly
from shipyard.train.metrics import Sample
from shipyard.train.state import FINAL, RunTable, TrainRun


def wall_time(run: TrainRun, now: float) -> float:
    end = run.updated_at if run.state in FINAL else now
    return max(0.0, end - run.started_at)


def mtbf(run: TrainRun, ledger: Ledger, now: float) -> float:
    """Observed mean time between failures, or the configured prior before the first one."""
    if ledger.failures:
        return wall_time(run, now) / ledger.failures
    return float(TrainConfig.from_dict(run.config).controller.mtbf_prior_s)


def status(run: TrainRun, now: float | None = None) -> dict[str, Any]:
    now = now or time.time()
    ledger = Ledger.from_dict(run.ledger) if run.ledger else Ledger()
    wall = wall_time(run, now)
    return {
        "run": run.run_id,
        "state": run.state,
        "reason": run.reason,
        "world_size": run.world_size,
        "attempt": run.attempt,
        "step": run.step,
        "steps": TrainConfig.from_dict(run.config).train.steps,
        "checkpoint_step": run.checkpoint_step,
        "failures": ledger.failures,
        "goodput": ledger.breakdown(wall)["goodput"],
        "wall_s": wall,
        "skips": run.skips,
        "model": run.model_id,
        "rank_pids": run.rank_pids,
    }


def report(run: TrainRun, table: RunTable, now: float | None = None) -> dict[str, Any]:
    now = now or time.time()
    ledger = Ledger.from_dict(run.ledger) if run.ledger else Ledger()
    wall = wall_time(run, now)
    events = table.events(run.run_id)
    failures = [e.detail for e in events if e.kind == "failure"]
    stall = statistics.median(ledger.stalls) if ledger.stalls else 0.0
    m = mtbf(run, ledger, now)
    tau = young_daly(stall, m)
    restart = ledger.restart / ledger.failures if ledger.failures else 0.0
    return {
        **status(run, now),
        "breakdown": ledger.breakdown(wall),
        "checkpoint": {
            "stall_s": stall,
            "mtbf_s": m,
            "mtbf_observed": ledger.failures > 0,
            "young_daly_s": tau,
            "model_goodput_at_tau": model_goodput(stall, m, restart, tau),
        },
        "mean_restart_s": restart,
        "failures_by_kind": dict(Counter(str(f["kind"]) for f in failures)),
        "failure_events": failures,
        "hangs": [
            {k: v for k, v in e.detail.items() if k != "stacks"} for e in events if e.kind == "hang"
        ],
        "stragglers": [e.detail for e in events if e.kind == "straggler"],
        "rollbacks": [e.detail for e in events if e.kind == "rollback"],
        "chaos": [e.detail for e in events if e.kind == "chaos"],
        "step_times_csv": f"{run.run_dir}/steps.csv",
    }


def metric_samples(
    run: TrainRun, per_rank: dict[int, tuple[float, float]], stragglers: int
) -> list[Sample]:
    """Samples for /metrics; `per_rank` is each rank's last (step time, work time)."""
    ledger = Ledger.from_dict(run.ledger) if run.ledger else Ledger()
    now = time.time()
    breakdown = ledger.breakdown(wall_time(run, now))
    stall = statistics.median(ledger.stalls) if ledger.stalls else 0.0
    run_label = {"run": run.run_id}
    samples: list[Sample] = [
        ("shipyard_train_step", run_label, run.step),
        ("shipyard_train_checkpoint_step", run_label, run.checkpoint_step),
        ("shipyard_train_attempt", run_label, run.attempt),
        ("shipyard_train_failures_total", run_label, ledger.failures),
        ("shipyard_train_goodput_ratio", run_label, breakdown["goodput"]),
        ("shipyard_train_young_daly_seconds", run_label, young_daly(stall, mtbf(run, ledger, now))),
    ]
    samples.append(("shipyard_train_stragglers_total", run_label, stragglers))
    for rank, (step_time, work_time) in sorted(per_rank.items()):
        labels = {**run_label, "rank": str(rank)}
        samples.append(("shipyard_train_rank_step_seconds", labels, step_time))
        samples.append(("shipyard_train_rank_work_seconds", labels, work_time))
    for bucket, seconds in breakdown.items():
        if bucket not in ("goodput", "wall"):
            samples.append(("shipyard_train_seconds", {**run_label, "bucket": bucket}, seconds))
    return samples
