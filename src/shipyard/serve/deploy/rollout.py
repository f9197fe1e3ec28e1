"""The canary driver: start the candidate, walk the stages, promote by CAS or roll back.

The eval gate is scored by direct calls: each item goes greedily to one replica of the candidate
and one of the current version (the current version's score is taken once per rollout, the
candidate's at every stage). The current version's replicas keep running throughout, so a
rollback is a router PUT away; the candidate's are stopped on rollback. On promotion the alias
(when the spec's model is one) moves by compare-and-swap from the current artifact to the
candidate; a concurrent move makes the CAS fail, and the rollout is rolled back instead.
"""

import time
from typing import Any

from shipyard.errors import Conflict, InvalidInput, ShipyardError, StorageError
from shipyard.serve.deploy import replicas as rp
from shipyard.serve.deploy.canary import Rollout, StageMetrics, judge, rolled_back, step
from shipyard.serve.deploy.controller import Controller, version_of
from shipyard.serve.deploy.evalgate import Item, Score, completion_request, load_items, score

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
    version = version_of(candidate)
    if ctrl.previous and ctrl.previous != version:
        ctrl.drop(ctrl.previous)  # one warm fallback at a time: the current version
    ctrl.previous = None
    ctrl.artifacts[version] = candidate
    ctrl.gate.clear()
    count = ctrl.spec.canary.replicas or max(1, ctrl.count())
    try:
        ctrl.grow(version, count - ctrl.count(version))
        if ctrl.count() == 0:  # scaled to zero: the comparison needs a current replica
            ctrl.grow(ctrl.current, 1)
    except ShipyardError:
        ctrl.drop(version)  # a candidate that cannot start leaves nothing running
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
    scores = _gate_scores(ctrl, version, rollout.stage)
    verdict = judge(
        spec.canary, spec.slo, spec.eval_gate, now - rollout.stage_started, metrics, scores
    )
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
                    "eval": None if scores is None else [s.__dict__ for s in scores],
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


def _gate_scores(ctrl: Controller, version: str, stage: int) -> tuple[Score, Score] | None:
    gate = ctrl.spec.eval_gate
    if gate.items is None:
        return None
    memory = ctrl.gate
    key = (version, stage)
    if memory.get("gate_key") != key:
        items = load_items(gate.items)
        if "gate_current" not in memory:
            memory["gate_current"] = _score_on(ctrl, ctrl.current, items)
        memory["gate_key"] = key
        memory["gate_candidate"] = _score_on(ctrl, version, items)
    return memory["gate_candidate"], memory["gate_current"]


def _score_on(ctrl: Controller, version: str, items: list[Item]) -> Score:
    """Score `items` on one replica of `version`; an item it answers with an error fails."""
    url = ctrl.replicas[version][0].url

    def answer(item: Item) -> str:
        try:
            return rp.complete(url, completion_request(item, ctrl.spec.name), ctrl.own_key)
        except StorageError:
            return ""  # counted as a failed item: a version that errors fails its gate

    return score(items, answer)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _now(now: float | None) -> float:
    return time.time() if now is None else now
