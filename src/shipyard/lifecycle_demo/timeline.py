"""When each step of a run's lifecycle happened, read back from what the parts record: the
checkpoint's manifest (its commit), the run's events (published, enqueued, gate, rollout), the
eval queue (first claim, last score) and the deployment's decision log (canary begun, promoted).
`shipyard demo` prints these; benchmarks/lifecycle.py measures with them.
"""

import json
from pathlib import Path
from typing import Any

from shipyard.evals.runner import queue_name
from shipyard.train.state import RunTable

# The phases of a checkpoint's way to its eval result; the last is the whole of it.
CHECKPOINT_PHASES = (
    "commit_to_published",
    "published_to_enqueued",
    "enqueued_to_claimed",
    "eval_work",
    "commit_to_result",
)


def measure(home: Path, run_id: str) -> dict[str, Any]:
    """{"checkpoints": per evaluated checkpoint, its step and `CHECKPOINT_PHASES` in seconds;
    "promotion": the rolled-out checkpoint's gate → handed → canary begun → promoted (empty when
    none was promoted)} for run `run_id` of the `$SHIPYARD_HOME` `home`."""
    table = RunTable()
    try:
        run = table.get(run_id)
        events: dict[str, list[dict[str, Any]]] = {}
        for event in table.events(run_id):
            events.setdefault(event.kind, []).append({**event.detail, "at": event.at})
        checkpoints = []
        for enq in sorted(events.get("evals-enqueued", []), key=lambda d: int(d["step"])):
            step = int(enq["step"])
            manifest = Path(run.run_dir, "checkpoints", f"step-{step:010d}", "manifest.json")
            published = [e for e in events.get("checkpoint-published", []) if e["step"] == step]
            times = _queue_times(table, str(enq["model"]))
            if not (manifest.exists() and published and times):
                continue  # its checkpoint collected since, or its evals not finished
            committed = manifest.stat().st_mtime
            checkpoints.append(
                {
                    "step": step,
                    "commit_to_published": published[0]["at"] - committed,
                    "published_to_enqueued": enq["at"] - published[0]["at"],
                    "enqueued_to_claimed": times[0] - enq["at"],
                    "eval_work": times[1] - times[0],
                    "commit_to_result": times[1] - committed,
                }
            )
    finally:
        table.close()
    return {"checkpoints": checkpoints, "promotion": _promotion(home, events)}


def _queue_times(table: RunTable, model: str) -> tuple[float, float] | None:
    """(first claim, last finish) of the model's eval queue items; None while unfinished."""
    rows = table.db.rows(
        "SELECT MIN(a.claimed_at), MAX(i.finished_at), SUM(CASE WHEN i.finished_at IS NULL "
        "THEN 1 ELSE 0 END) FROM queue_items i JOIN queue_attempts a ON a.item_id = i.id "
        "WHERE i.queue = ?",
        (queue_name(model),),
    )
    claimed, finished, open_items = rows[0]
    if claimed is None or finished is None or open_items:
        return None
    return float(claimed), float(finished)


def _promotion(home: Path, events: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    rolled = [e for e in events.get("rollout", []) if e.get("command")]
    if not rolled:
        return {}
    rollout = rolled[-1]
    gate = next(g for g in events["gate"] if g["step"] == rollout["step"])
    log = home / "serve" / "deployments" / f"{rollout['deployment']}.decisions.jsonl"
    decisions = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    canary = [d for d in decisions if d.get("kind") == "canary" and d.get("to") == rollout["model"]]
    began = next((d["time"] for d in canary if d["action"] == "begin"), None)
    promoted = next((d["time"] for d in canary if d["action"] == "promote"), None)
    if began is None or promoted is None:
        return {}
    return {
        "gate_to_handed": rollout["at"] - gate["at"],
        "handed_to_canary_began": began - rollout["at"],
        "canary_began_to_promoted": promoted - began,
        "promoted_at": promoted,
        "gate_at": gate["at"],
        "version": str(rollout["model"])[:12],
    }
