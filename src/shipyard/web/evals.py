"""Eval results for the console: every run's mean ± SE, one task's scores across checkpoints,
and the paired item-level difference of two runs, all from `evals`' own report functions."""

import contextlib
from collections.abc import Iterator
from html import escape
from pathlib import Path
from typing import Any

from shipyard.db import database_url, open_database
from shipyard.evals import compare as compare_runs
from shipyard.evals import get_task, judge_version
from shipyard.evals.report import summarize
from shipyard.evals.store import ResultStore

MAX_CHANGED = 500  # item rows shown in a comparison; the count says how many there were
_FONT = 'font-family="sans-serif" font-size="11" fill="#445"'


@contextlib.contextmanager
def _store(home: Path) -> Iterator[ResultStore]:
    db = open_database(database_url(home), "eval results")
    try:
        yield ResultStore(db)
    finally:
        db.close()


def _line(store: ResultStore, run: dict[str, Any]) -> dict[str, Any]:
    line = summarize(store, run)
    return {"model_id": run["model_id"], "created_at": run["created_at"], **line}


def runs(home: Path) -> list[dict[str, Any]]:
    """Every eval run with its mean ± SE, by model then task."""
    with _store(home) as store:
        lines = [_line(store, run) for run in store.runs()]
    return sorted(lines, key=lambda r: (r["model_id"], r["task"], r["created_at"]))


def series(home: Path, task: str, source: str = "") -> dict[str, Any]:
    """`task`'s score on each model it ran on, oldest first: a checkpoint series. With `source`
    (a trigger source such as `run:ID` or `alias:NAME`), only that source's checkpoints, in the
    order they were triggered, each numbered. A model that ran the task more than once (another
    template, sampling) shows its newest run."""
    with _store(home) as store:
        newest: dict[str, dict[str, Any]] = {}
        for run in store.runs():  # oldest first
            if run["task"] == task:
                newest.pop(run["model_id"], None)
                newest[run["model_id"]] = run
        # the store has no reader for its trigger table; these two reads are the console's
        sources = [str(r[0]) for r in store.db.rows("SELECT DISTINCT source FROM eval_triggers")]
        if not source:
            points = [_line(store, run) for run in newest.values()]
        else:
            ordinals = store.db.rows(
                "SELECT artifact_id, ordinal FROM eval_triggers WHERE source = ? ORDER BY ordinal",
                (source,),
            )
            points = [
                {"checkpoint": int(n), **_line(store, newest[str(m)])}
                for m, n in ordinals
                if str(m) in newest
            ]
    return {"task": task, "source": source or None, "sources": sorted(sources), "points": points}


def compare(home: Path, run_a: str, run_b: str) -> dict[str, Any]:
    """The paired difference a - b and each changed item's two scores."""
    with _store(home) as store:
        result = compare_runs(store, run_a, run_b)
        judge = judge_version(get_task(str(store.run(run_a)["task_ref"])))
        a = {r.item_id: r for r in store.scores(run_a, judge)}
        b = {r.item_id: r for r in store.scores(run_b, judge)}
    changed = result["changed_items"]
    result["items"] = [
        {
            "item": i,
            "a": a[i].score,
            "b": b[i].score,
            "a_outcome": a[i].outcome,
            "b_outcome": b[i].outcome,
        }
        for i in changed[:MAX_CHANGED]
    ]
    result["changed"] = len(changed)
    return result


def error_bars(points: list[dict[str, Any]], label: str, width: int = 640) -> str:
    """Means with ±1 SE bars, one per point in order, labelled by model id."""
    shown = [p for p in points if p.get("mean") is not None]
    if not shown:
        return f'<p class="empty">no {escape(label)} scores recorded</p>'
    height, pad = 220, 36
    lows = [p["mean"] - (p["se"] or 0.0) for p in shown]
    highs = [p["mean"] + (p["se"] or 0.0) for p in shown]
    y0, y1 = min(lows), max(highs)
    step = (width - 2 * pad) / max(len(shown) - 1, 1)

    def y(value: float) -> float:
        return float(height - pad - (value - y0) / ((y1 - y0) or 1) * (height - 2 * pad))

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width}" '
        f'height="{height}" role="img" aria-label="{escape(label)}">',
        f'<rect x="{pad}" y="{pad}" width="{width - 2 * pad}" height="{height - 2 * pad}" '
        'fill="none" stroke="#ccd"/>',
        f'<text x="{pad}" y="{pad - 6}" {_FONT}>{escape(label)}: max {y1:.4g}</text>',
        f'<text x="{width - pad}" y="{pad - 6}" {_FONT} text-anchor="end">min {y0:.4g}</text>',
    ]
    centres = []
    for index, (point, low, high) in enumerate(zip(shown, lows, highs, strict=True)):
        x = pad + index * step
        centres.append(f"{x:.1f},{y(point['mean']):.1f}")
        tip = f"{point['model_id'][:12]}: {point['mean']:.4g} ± {point['se'] or 0:.2g}"
        parts.append(
            f'<g class="point"><title>{escape(tip)}</title>'
            f'<line x1="{x:.1f}" y1="{y(low):.1f}" x2="{x:.1f}" y2="{y(high):.1f}" '
            'stroke="#2a62c9"/>'
            f'<circle cx="{x:.1f}" cy="{y(point["mean"]):.1f}" r="3" fill="#2a62c9"/></g>'
        )
    parts.append(
        f'<polyline points="{" ".join(centres)}" fill="none" stroke="#2a62c9" '
        'stroke-opacity="0.4"/></svg>'
    )
    return "".join(parts)
