"""The canary driver: start the candidate, walk the stages, promote by CAS or roll back.

The eval gate (`evalgate.GateRun`) starts with the rollout: both versions' runs of the spec's
eval tasks go on the work queue and eval workers work them while the first stage takes traffic;
no stage passes before the gate has decided, and a failed gate rolls back. The current version's
replicas keep running throughout, so a rollback is a router PUT away; the candidate's are stopped
on rollback. On promotion the alias
(when the spec's model is one) moves by compare-and-swap from the current artifact to the
candidate; a concurrent move makes the CAS fail, and the rollout is rolled back instead.
"""

import time
from typing import Any

from shipyard.errors import Conflict, InvalidInput, ShipyardError
from shipyard.evals.gate import GateDecision
from shipyard.serve.deploy import replicas as rp
from shipyard.serve.deploy.canary import Evals, Rollout, StageMetrics, judge, rolled_back, step
from shipyard.serve.deploy.controller import Controller, version_of
from shipyard.serve.deploy.evalgate import GateRun

CAS_LOST = "moved concurrently"  # in the reason of a rollout whose alias CAS failed


def begin(ctrl: Controller, ref: str, now: float | None = None) -> Rollout:
    """Start moving `ctrl`'s deployment to `ref`: candidate replicas up, first stage's split."""
    if ctrl.spec.engine.kind == "openai":
        raise InvalidInput("a rollout needs engine transformers: an openai server owns its model")
    if ctrl.rollout and ctrl.rollout.status == "running":
        raise Conflict(f"a rollout to {ctrl.rollout.candidate[:12]} is already running")
    candidate = ctrl.resolve_model(ref)
    current = ctrl.artifacts[ctrl.current]
    if candidate == current:
        raise InvalidInput(f"{ref!r} is {candidate[:12]}, the version already serving")
    _stop_gate(ctrl)
    gate = ctrl.spec.eval_gate
    if gate.tasks:  # first: a gate task gone since the spec was read refuses the rollout
        ctrl.gate = GateRun(gate, candidate, current, ctrl.home, rp.logs_dir(ctrl.home))
    version = version_of(candidate)
    if ctrl.previous and ctrl.previous != version:
        ctrl.drop(ctrl.previous)  # one warm fallback at a time: the current version
    ctrl.previous = None
    ctrl.artifacts[version] = candidate
    count = ctrl.spec.canary.replicas or max(1, ctrl.count())
    try:
        ctrl.grow(version, count - ctrl.count(version))
        if ctrl.count() == 0:  # scaled to zero: the current version's share needs a replica
            ctrl.grow(ctrl.current, 1)
    except ShipyardError:
        ctrl.drop(version)  # a candidate that cannot start leaves nothing running
        _stop_gate(ctrl)
        raise
    ctrl.rollout = Rollout(current, candidate, stage_started=_now(now), began=_now(now))
    ctrl.records.log(ctrl.spec.name, {"kind": "canary", "action": "begin", "to": candidate})
    ctrl.push()
    return ctrl.rollout


def advance(ctrl: Controller, now: float | None = None) -> Rollout:
    """Judge the running stage once; move to the next stage, promote or roll back."""
    rollout = ctrl.rollout
    assert rollout is not None and rollout.status == "running"
    now = _now(now)
    spec = ctrl.spec
    stages = spec.canary.stages
    version = version_of(rollout.candidate)
    raw = ctrl.stats().get("versions", {}).get(version, {})
    metrics = StageMetrics(
        requests=_int(raw.get("requests")),
        errors=_int(raw.get("errors")),
        ttft_p50_ms=raw.get("ttft_ms_p50"),
        ttft_p99_ms=raw.get("ttft_ms_p99"),
    )
    evals: Evals = None
    if ctrl.gate is not None:
        evals = ctrl.gate.poll() or "pending"
    verdict = judge(spec.canary, spec.slo, now - rollout.stage_started, metrics, evals)
    after = step(rollout, stages, verdict, now)
    if verdict.outcome != "wait":
        ctrl.records.log(
            spec.name,
            {
                "kind": "canary",
                "action": verdict.outcome,
                "stage": stages[rollout.stage],
                "reason": verdict.reason,
                "inputs": {
                    "metrics": metrics.__dict__,
                    "eval": evals.as_json() if isinstance(evals, GateDecision) else evals,
                },
            },
        )
    ctrl.rollout = after
    if after.status == "promoted":
        promote(ctrl, now)
    elif after.status == "rolled_back":
        abandon(ctrl)
    elif after.stage != rollout.stage:
        ctrl.push()
    return ctrl.rollout


def promote(ctrl: Controller, now: float) -> None:
    """Move the alias by CAS, then all traffic; the old version stays warm for `rollback`."""
    rollout = ctrl.rollout
    assert rollout is not None
    _stop_gate(ctrl)
    alias = ctrl.spec.model if ctrl.ws.catalog.get_alias(ctrl.spec.model) else None
    if alias:
        try:
            ctrl.ws.move_alias(alias, rollout.candidate, expect=rollout.current)
        except Conflict as exc:
            ctrl.rollout = rolled_back(rollout, f"alias {alias!r} {CAS_LOST}: {exc}", now)
            ctrl.records.log(ctrl.spec.name, {"kind": "canary", "action": "cas-failed"})
            abandon(ctrl)
            return
    ctrl.previous, ctrl.current = ctrl.current, version_of(rollout.candidate)
    ctrl.last_change = time.monotonic()
    ctrl.records.log(
        ctrl.spec.name,
        {"kind": "canary", "action": "promote", "to": rollout.candidate, "alias": alias},
    )
    ctrl.push()


def abandon(ctrl: Controller) -> None:
    """Traffic back to the current version, then stop the candidate's replicas."""
    rollout = ctrl.rollout
    assert rollout is not None
    _stop_gate(ctrl)
    ctrl.push()  # status is rolled_back: the candidate's weight is gone
    ctrl.drop(version_of(rollout.candidate))
    ctrl.push()
    ctrl.records.log(
        ctrl.spec.name, {"kind": "canary", "action": "rollback", "reason": rollout.reason}
    )


def rollback(ctrl: Controller, now: float | None = None) -> str:
    """The operator's rollback: stop a running canary, or return to the warm previous version."""
    rollout = ctrl.rollout
    if rollout and rollout.status == "running":
        ctrl.rollout = rolled_back(rollout, "rolled back by the operator", _now(now))
        abandon(ctrl)
        return f"canary of {rollout.candidate[:12]} stopped; serving {ctrl.current}"
    if not ctrl.previous or not ctrl.count(ctrl.previous):
        raise InvalidInput(f"deployment {ctrl.spec.name!r} has no warm previous version")
    back, forward = ctrl.artifacts[ctrl.previous], ctrl.artifacts[ctrl.current]
    if ctrl.ws.catalog.get_alias(ctrl.spec.model):
        ctrl.ws.move_alias(ctrl.spec.model, back, expect=forward)
    ctrl.current, ctrl.previous = ctrl.previous, ctrl.current
    if rollout:
        ctrl.rollout = rolled_back(rollout, "rolled back by the operator", _now(now))
    ctrl.push()
    ctrl.records.log(ctrl.spec.name, {"kind": "canary", "action": "rollback", "to": back})
    return f"serving {ctrl.current} again; {forward[:12]} kept warm"


def _stop_gate(ctrl: Controller) -> None:
    """End the gate's eval workers, if any still run (the results they stored are kept)."""
    if ctrl.gate is not None:
        ctrl.gate.stop()
        ctrl.gate = None


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _now(now: float | None) -> float:
    return time.time() if now is None else now
