"""Gate → deploy: judge each evaluated checkpoint against what the run's deployment serves, and
roll the newest one that passed out by canary.

A checkpoint is judged (once: a `gate` run event) when its model's and the baseline's gate-task
runs are complete, in step order; the baseline is the model the deployment's current version
serves then, whose gate-task runs are enqueued here if missing. The rule is `evals.gate.judge`'s
paired one. A pass stores the decision as an `eval-report` artifact whose inputs are the
candidate and the baseline, so lineage links the model to it. The newest passing checkpoint is
then handed to the deployment's controller as `shipyard serve rollout` does (a `rollout`
command: canary stages, the alias moves by compare-and-swap only at promotion), once no rollout
is running there; an older pass superseded meanwhile is not rolled out.
"""

import json
import tempfile
from pathlib import Path
from typing import Any

from shipyard.errors import NotFound, ShipyardError
from shipyard.evals.runner import plan, queue_name
from shipyard.evals.store import ResultStore
from shipyard.evals.tasks import get_task
from shipyard.queue import Queue
from shipyard.serve.deploy.controller import submit
from shipyard.serve.deploy.state import Records, pid_alive
from shipyard.train.config import TrainConfig
from shipyard.train.hooks import gate_tasks
from shipyard.train.state import RunTable, TrainRun
from shipyard.workspace import Workspace

GATE_REPORT_FORMAT = 1


def deployed_model(name: str) -> str:
    """The model artifact the deployment's current version serves."""
    record = Records().read(name)
    artifact = record.get("artifacts", {}).get(record.get("current"))
    if not isinstance(artifact, str):
        raise NotFound(f"deployment {name!r} serves no model yet")
    return artifact


def complete(queue: Queue, model_id: str, tasks: tuple[str, ...]) -> bool:
    """Every task has a run for the model and the model's queue has nothing left to work
    (each item scored, or dead after its attempts)."""
    names = {get_task(ref).name for ref in tasks}
    if not names <= {str(r["task"]) for r in ResultStore(queue.db).runs(model_id)}:
        return False
    return not queued(queue, model_id)


def queued(queue: Queue, model_id: str) -> bool:
    """Whether the model's eval queue holds items ready, waiting or held by a worker."""
    try:
        (stats,) = queue.stats(queue_name(model_id))
    except NotFound:
        return False
    return stats.ready + stats.waiting + stats.leased > 0


def judge_ready(
    ws: Workspace, queue: Queue, table: RunTable, run: TrainRun, given_up: set[str]
) -> int:
    """Judge, in step order, each enqueued checkpoint whose evals (and the baseline's) are
    complete; stops at the first that is not. A model in `given_up` (its eval workers kept
    failing) fails its gate. Returns how many were judged."""
    from shipyard.evals.gate import judge

    cfg = TrainConfig.from_dict(run.config)
    tasks = gate_tasks(cfg)
    judged = {e.detail["step"] for e in table.events(run.run_id, "gate")}
    waiting = [e.detail for e in table.events(run.run_id, "evals-enqueued")]
    count = 0
    for detail in sorted(waiting, key=lambda d: int(d["step"])):
        if detail["step"] in judged:
            continue
        step, candidate = int(detail["step"]), str(detail["model"])
        try:
            baseline = deployed_model(cfg.deploy.deployment)
        except ShipyardError as exc:
            _decide(table, run, step, candidate, "", False, f"no baseline: {exc}")
            count += 1
            continue
        if baseline == candidate:
            _decide(table, run, step, candidate, baseline, False, "already the deployed model")
            count += 1
            continue
        plan(queue, baseline, tasks)  # idempotent: a baseline evaluated before adds nothing
        failing = [m for m in (candidate, baseline) if m in given_up]
        if failing:
            why = f"the evals of {failing[0][:16]} were given up: its eval workers kept failing"
            _decide(table, run, step, candidate, baseline, False, why)
            count += 1
            continue
        if not (complete(queue, candidate, tasks) and complete(queue, baseline, tasks)):
            break
        store, drop, z = ResultStore(queue.db), cfg.deploy.max_drop, cfg.deploy.z
        try:
            decision = judge(store, candidate, baseline, list(tasks), drop, z)
        except ShipyardError as exc:  # e.g. no item both models scored
            _decide(table, run, step, candidate, baseline, False, str(exc))
            count += 1
            continue
        verdicts = decision.as_json()
        report = ""
        if decision.passed:
            report = _put_gate_report(ws, run, step, candidate, baseline, verdicts)
        _decide(
            table,
            run,
            step,
            candidate,
            baseline,
            decision.passed,
            decision.reason,
            report,
            verdicts,
        )
        count += 1
    return count


def roll_out(table: RunTable, run: TrainRun) -> bool:
    """Hand the newest passing checkpoint not yet rolled out to the deployment's controller;
    False while that must wait for a rollout running there (a live controller's)."""
    cfg = TrainConfig.from_dict(run.config)
    passed = [e.detail for e in table.events(run.run_id, "gate") if e.detail["passed"]]
    if not passed:
        return True
    newest = max(passed, key=lambda d: int(d["step"]))
    rolled = [int(e.detail["step"]) for e in table.events(run.run_id, "rollout")]
    if rolled and max(rolled) >= int(newest["step"]):
        return True
    name, records = cfg.deploy.deployment, Records()
    detail: dict[str, Any] = {"step": newest["step"], "model": newest["model"], "deployment": name}
    try:
        record = records.read(name)
        running = (record.get("rollout") or {}).get("status") == "running"
        if running and pid_alive(record.get("controller_pid")):
            return False
        detail["command"] = submit(records, name, {"op": "rollout", "to": newest["model"]})
    except ShipyardError as exc:  # no running controller, the deployment removed: said, once
        detail["error"] = str(exc)
    table.event(run.run_id, "rollout", **detail)
    return True


def _decide(
    table: RunTable,
    run: TrainRun,
    step: int,
    candidate: str,
    baseline: str,
    passed: bool,
    reason: str,
    report: str = "",
    verdicts: dict[str, Any] | None = None,
) -> None:
    table.event(
        run.run_id,
        "gate",
        step=step,
        model=candidate,
        baseline=baseline,
        passed=passed,
        reason=reason,
        report=report,
        verdicts=verdicts or {},
    )


def _put_gate_report(
    ws: Workspace, run: TrainRun, step: int, candidate: str, baseline: str, verdicts: Any
) -> str:
    cfg = TrainConfig.from_dict(run.config)
    report = {
        "format": GATE_REPORT_FORMAT,
        "kind": "gate",
        "run": run.run_id,
        "step": step,
        "model_id": candidate,
        "baseline": baseline,
        "deployment": cfg.deploy.deployment,
        "decision": verdicts,
    }
    with tempfile.TemporaryDirectory(prefix="shipyard-gate-report-") as scratch:
        (Path(scratch) / "report.json").write_text(json.dumps(report, indent=2, sort_keys=True))
        metadata = {"model_id": candidate, "baseline": baseline, "tasks": list(gate_tasks(cfg))}
        inputs = [candidate, baseline]
        return ws.put(Path(scratch), "eval-report", inputs=inputs, metadata=metadata).id
