"""What the console shows about training runs: status, loss, goodput, step times, failures,
and each checkpoint's evals, gate decision and rollout."""

import csv
import math
from pathlib import Path
from typing import Any

from shipyard.train import RunTable, report, status
from shipyard.train.evalview import lifecycle_view

MAX_STEPS_SHOWN = 400  # heatmap columns; longer runs are shown in evenly spaced steps
MAX_STEP_ROWS = 200_000  # a steps.csv beyond this is read only this far


def list_runs(table: RunTable) -> list[dict[str, Any]]:
    """Every training run, newest first, with its status line."""
    ids = [r[0] for r in table.db.rows("SELECT run_id FROM train_runs ORDER BY started_at DESC")]
    return [status(table.get(run_id)) for run_id in ids]


def run_detail(table: RunTable, run_id: str) -> dict[str, Any]:
    """`shipyard train report` plus the loss curve, the step-time heatmap, hang stacks and, when
    the run evaluates its checkpoints, each one's scores, gate decision and rollout."""
    run = table.get(run_id)
    info = {**report(run, table), **lifecycle_view(table, run)}
    steps = _read_steps(Path(run.run_dir) / "steps.csv")
    info["loss_curve"] = _loss_curve(steps)
    info["heatmap"] = _heatmap(steps)
    info["hang_stacks"] = [e.detail.get("stacks", {}) for e in table.events(run_id, "hang")]
    return info


def _read_steps(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with open(path, newline="") as file:
        rows = []
        for index, row in enumerate(csv.DictReader(file)):
            if index == MAX_STEP_ROWS:
                break
            rows.append(row)
        return rows


def _number(text: str | None) -> float | None:
    """A decimal or, as the step log writes losses exactly, a hex float; None if neither."""
    text = (text or "").strip()
    try:
        value = float.fromhex(text) if "0x" in text.lower() else float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _loss_curve(steps: list[dict[str, str]]) -> list[list[float]]:
    """[step, mean loss over ranks], the last attempt's value where a step was redone."""
    by_step: dict[int, dict[int, float]] = {}
    for row in steps:
        step, rank, loss = _number(row.get("step")), _number(row.get("rank")), _number(row["loss"])
        if step is not None and rank is not None and loss is not None:
            by_step.setdefault(int(step), {})[int(rank)] = loss
    return [[s, sum(v.values()) / len(v)] for s, v in sorted(by_step.items())]


def _heatmap(steps: list[dict[str, str]]) -> dict[str, Any]:
    """Step time per (rank, step): rows are ranks, columns steps (sampled on long runs)."""
    cells: dict[tuple[int, int], float] = {}
    for row in steps:
        step, rank = _number(row.get("step")), _number(row.get("rank"))
        seconds = _number(row.get("step_time"))
        if step is not None and rank is not None and seconds is not None:
            cells[int(rank), int(step)] = seconds
    ranks = sorted({rank for rank, _ in cells})
    all_steps = sorted({step for _, step in cells})
    stride = max(1, math.ceil(len(all_steps) / MAX_STEPS_SHOWN))
    shown = all_steps[::stride]
    return {
        "ranks": ranks,
        "steps": shown,
        "seconds": [[cells.get((rank, step)) for step in shown] for rank in ranks],
    }
