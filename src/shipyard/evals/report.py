"""Summaries, paired comparisons and the eval-report artifact.

A report is computed from stored item scores, plus the items the queue gave up on (dead, with
their last reason), so a mean over fewer items than planned says why. Each line names its full
key, so a score is never a silent mix of two templates or harness versions: runs that differ in
any key field are separate lines. `put_report` stores the report as an artifact of kind
`eval-report` whose lineage input is the model it evaluated.
"""

import json
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shipyard.errors import NotFound, ShipyardError
from shipyard.evals.runner import queue_name
from shipyard.evals.stats import Estimate, estimate, paired
from shipyard.evals.store import ResultStore, ScoreRow, judge_version
from shipyard.evals.tasks import get_task
from shipyard.queue import Queue
from shipyard.workspace import Workspace

REPORT_FORMAT = 1


@dataclass(frozen=True)
class RunScores:
    judge: str
    rows: list[ScoreRow]
    clustered: bool  # the task's items declare clusters: errors are clustered

    @property
    def by_item(self) -> dict[str, float]:
        return {r.item_id: r.score for r in self.rows}

    @property
    def clusters(self) -> dict[str, str | None] | None:
        return {r.item_id: r.cluster for r in self.rows} if self.clustered else None


def run_scores(store: ResultStore, run: dict[str, Any]) -> RunScores:
    """A run's item scores under its task's current judge, the one source of every summary,
    comparison and alert. A run whose task no longer loads (a deleted JSONL file) is read under
    its latest judge, clustered when its items name clusters."""
    try:
        task = get_task(str(run["task_ref"]))
        judge, clustered = judge_version(task), task.clustered
    except ShipyardError:
        judge = store.latest_judge(str(run["run_key"])) or "none"
        clustered = None
    rows = store.scores(str(run["run_key"]), judge)
    if clustered is None:
        clustered = any(r.cluster is not None for r in rows)
    return RunScores(judge, rows, clustered)


def paired_runs(store: ResultStore, run_a: dict[str, Any], run_b: dict[str, Any]) -> Estimate:
    """The paired difference a - b on the items both runs scored, clustered as `a`'s task is:
    what `eval compare` reports and `eval alert` tests."""
    a, b = run_scores(store, run_a), run_scores(store, run_b)
    return paired(a.by_item, b.by_item, a.clusters)


def dead_items(queue: Queue, run: dict[str, Any]) -> list[dict[str, str]]:
    """The run's items that the queue gave up on, each with the reason of its last attempt."""
    try:
        dead = queue.dead(queue_name(str(run["model_id"])), limit=100_000)
    except NotFound:  # never enqueued here
        return []
    return [
        {
            "item": str(r.payload.get("item")),
            "reason": (r.history[-1].reason or r.history[-1].outcome or "") if r.history else "",
        }
        for r in dead
        if isinstance(r.payload, dict) and r.payload.get("run") == run["run_key"]
    ]


def summarize(store: ResultStore, run: dict[str, Any]) -> dict[str, Any]:
    """One run's line: its full key, mean ± SE under the task's current judge, outcomes, and
    the items that died in the queue without a score."""
    scores = run_scores(store, run)
    rows = scores.rows
    est = estimate([r.score for r in rows], [r.cluster for r in rows] if scores.clustered else None)
    dead = dead_items(Queue(store.db), run)
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
            "judge_version": scores.judge,
        },
        "items": int(run["items"]),
        "scored": est.n,
        **est.as_json(),
        "outcomes": dict(sorted(Counter(r.outcome for r in rows).items())),
        "dead": len(dead),
        "dead_items": dead,
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
    a, b = run_scores(store, a_run).by_item, run_scores(store, b_run).by_item
    changed = sorted(i for i in set(a) & set(b) if a[i] != b[i])
    return {
        "task": a_run["task"],
        "a": {"run_key": run_a, "model_id": a_run["model_id"]},
        "b": {"run_key": run_b, "model_id": b_run["model_id"]},
        "same_key_except_model": _same_but_model(a_run, b_run),
        "difference": paired_runs(store, a_run, b_run).as_json(),
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
