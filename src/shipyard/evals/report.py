"""Summaries, paired comparisons and the eval-report artifact.

A report is computed from stored item scores only. Each line names its full key, so a score is
never a silent mix of two templates or harness versions: runs that differ in any key field are
separate lines. `put_report` stores the report as an artifact of kind `eval-report` whose lineage
input is the model it evaluated.
"""

import json
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from shipyard.errors import NotFound, ShipyardError
from shipyard.evals.stats import estimate, paired
from shipyard.evals.store import ResultStore, judge_version
from shipyard.evals.tasks import get_task
from shipyard.workspace import Workspace

REPORT_FORMAT = 1


def summarize(store: ResultStore, run: dict[str, Any]) -> dict[str, Any]:
    """One run's line: its full key, mean ± SE under the task's current judge, outcomes. A run
    whose task no longer loads (a deleted JSONL file) is summarised under its latest judge."""
    try:
        task = get_task(str(run["task_ref"]))
        judge, clustered = judge_version(task), task.clustered
    except ShipyardError:
        judge = store.latest_judge(str(run["run_key"])) or "none"
        clustered = None  # unknown: cluster when the items name clusters
    rows = store.scores(str(run["run_key"]), judge)
    if clustered is None:
        clustered = any(r.cluster is not None for r in rows)
    clusters = [r.cluster for r in rows] if clustered else None
    est = estimate([r.score for r in rows], clusters)
    return {
        "task": run["task"],
        "run_key": run["run_key"],
        "key": {
            "model_id": run["model_id"],
            "task_version": run["task_version"],
            "template_hash": run["template_hash"],
            "fewshot_hash": run["fewshot_hash"],
            "sampling": json.loads(run["sampling"]),
            "harness_version": run["harness_version"],
            "judge_version": judge,
        },
        "items": int(run["items"]),
        "scored": est.n,
        **est.as_json(),
        "outcomes": dict(sorted(Counter(r.outcome for r in rows).items())),
    }


def model_report(store: ResultStore, model_id: str) -> dict[str, Any]:
    runs = store.runs(model_id)
    if not runs:
        raise NotFound(f"no eval runs for model {model_id[:16]}")
    return {
        "format": REPORT_FORMAT,
        "model_id": model_id,
        "runs": [summarize(store, run) for run in runs],
    }


def compare(store: ResultStore, run_a: str, run_b: str) -> dict[str, Any]:
    """Paired difference (a - b) on the items both runs scored, plus the items that differ."""
    a_run, b_run = store.run(run_a), store.run(run_b)
    task = get_task(str(a_run["task_ref"]))
    judge = judge_version(task)
    a = {r.item_id: r for r in store.scores(run_a, judge)}
    b = {r.item_id: r for r in store.scores(run_b, judge)}
    clusters = {i: r.cluster for i, r in a.items()} if task.clustered else None
    diff = paired({i: r.score for i, r in a.items()}, {i: r.score for i, r in b.items()}, clusters)
    changed = sorted(i for i in set(a) & set(b) if a[i].score != b[i].score)
    return {
        "task": a_run["task"],
        "a": {"run_key": run_a, "model_id": a_run["model_id"]},
        "b": {"run_key": run_b, "model_id": b_run["model_id"]},
        "same_key_except_model": _same_but_model(a_run, b_run),
        "difference": diff.as_json(),
        "changed_items": changed,
    }


def _same_but_model(a: dict[str, Any], b: dict[str, Any]) -> bool:
    fields = ("task", "task_version", "template_hash", "fewshot_hash", "sampling")
    return all(a[f] == b[f] for f in (*fields, "harness_version"))


def put_report(workspace: Workspace, report: dict[str, Any], name: str | None = None) -> str:
    """Store `report` as an eval-report artifact linked to its model; returns its id."""
    with tempfile.TemporaryDirectory(prefix="shipyard-eval-report-") as scratch:
        path = Path(scratch) / "report.json"
        path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
        record = workspace.put(
            Path(scratch),
            "eval-report",
            name=name,
            inputs=[report["model_id"]],
            metadata={"model_id": report["model_id"], "tasks": [r["task"] for r in report["runs"]]},
        )
    return record.id
