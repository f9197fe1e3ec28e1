"""What `train status` and the console's run page show of a run's lifecycle: per checkpoint step
its eval scores (mean ± SE per task, or pending), its gate decision and rollout, and the
regression alert over the run's consecutive checkpoints."""

from typing import Any

from shipyard.errors import ShipyardError
from shipyard.evals.stats import regression_alert
from shipyard.evals.store import ResultStore
from shipyard.train.config import TrainConfig
from shipyard.train.hooks import wired
from shipyard.train.state import RunTable, TrainRun

ALERT_K = 2.0  # standard errors below the first checkpoint, twice in a row


def lifecycle_view(table: RunTable, run: TrainRun) -> dict[str, Any]:
    """{"checkpoints": [one row per step], "alerts": [messages], "rollouts": [...]}, or {} when
    the run's config names no evals."""
    cfg = TrainConfig.from_dict(run.config)
    if not wired(cfg):
        return {}
    store = ResultStore(table.db)
    rows: dict[int, dict[str, Any]] = {}

    def row(step: Any) -> dict[str, Any]:
        return rows.setdefault(int(step), {"step": int(step), "evals": [], "gate": None})

    for kind, key in (
        ("checkpoint-published", "checkpoint"),
        ("checkpoint-gone", "error"),
        ("evals-failed", "error"),
    ):
        for e in table.events(run.run_id, kind):
            row(e.detail["step"])[key] = e.detail.get(key)
    for e in table.events(run.run_id, "evals-enqueued"):
        r = row(e.detail["step"])
        r["model"] = e.detail["model"]
        r["evals"] = [_line(store, found) for found in store.runs(str(e.detail["model"]))]
    for e in table.events(run.run_id, "gate"):
        row(e.detail["step"])["gate"] = e.detail
    ordered = [rows[s] for s in sorted(rows)]
    return {
        "checkpoints": ordered,
        "alerts": _alerts(store, ordered),
        "rollouts": [_rollout(e.detail) for e in table.events(run.run_id, "rollout")],
    }


def _line(store: ResultStore, run: dict[str, Any]) -> dict[str, Any]:
    from shipyard.evals.report import summarize  # imports the engine: only for a wired run

    found = summarize(store, run)
    done = found["scored"] + found["dead"] >= found["items"]
    keep = ("task", "mean", "se", "scored", "dead")
    return {**{k: found[k] for k in keep}, "total": found["items"], "pending": not done}


def _alerts(store: ResultStore, rows: list[dict[str, Any]]) -> list[str]:
    """`evals.stats.regression_alert` per task: each complete checkpoint against the run's
    first, in step order."""
    series: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for r in rows:
        for line in r["evals"]:
            if not line["pending"] and "model" in r:
                series.setdefault(line["task"], []).append((r["model"], line))
    from shipyard.evals.report import run_scores

    alerts = []
    for task, points in series.items():
        if len(points) < 3:
            continue
        scores = []
        for model, _ in points:
            found = [x for x in store.runs(model) if x["task"] == task]
            scores.append((model, run_scores(store, found[-1])))
        base = scores[0][1]
        later = [(m, s.by_item) for m, s in scores[1:]]
        alert = regression_alert(base.by_item, later, ALERT_K, base.clusters)
        if alert is not None:
            alerts.append(f"{task}: {alert.message()}")
    return alerts


def _rollout(detail: dict[str, Any]) -> dict[str, Any]:
    """The rollout event with what the deployment's record says of it now."""
    out = dict(detail)
    if "command" not in detail:
        return out
    from shipyard.serve.deploy.state import Records

    try:
        record = Records().read(str(detail["deployment"]))
    except ShipyardError as exc:
        out["state"] = str(exc)
        return out
    command = record.get("commands", {}).get(detail["command"], {})
    out["state"] = command.get("state", "unknown")
    out["message"] = command.get("message", "")
    rollout = record.get("rollout") or {}
    if rollout.get("candidate") == detail["model"]:
        out["rollout"] = {k: rollout.get(k) for k in ("status", "stage", "reason")}
    return out
