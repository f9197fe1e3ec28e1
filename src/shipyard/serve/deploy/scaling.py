"""The autoscaler loop: read one deployment's signals, ask the policy, apply and log its answer.

Signals: queue depth per tier and running requests summed over the current version's replicas'
`/health` (as `Controller.probe` last read it); TTFT p50/p99 (while requests arrive) and request
counts from the router's per-version stats (a window that opens at each PUT, so at each scaling
change); requests the controller's endpoint turned away (503) while at zero.
"""

import math
import time
from typing import Any

from shipyard.serve.deploy.autoscaler import Decision, Signals, decide
from shipyard.serve.deploy.controller import Controller


def read_signals(ctrl: Controller, now: float) -> Signals:
    memory = ctrl.scaling
    queue = {"interactive": 0, "standard": 0, "batch": 0}
    running = 0
    silent = 0
    for replica in list(ctrl.replicas.get(ctrl.current, [])):
        report = ctrl.health.get(replica.name) or {}
        silent += 0 if report else 1
        depths = report.get("queue")
        if isinstance(depths, dict):
            for tier in queue:
                depth = depths.get(tier)
                queue[tier] += depth if isinstance(depth, int) and depth > 0 else 0
        busy = report.get("running")
        running += busy if isinstance(busy, int) and busy > 0 else 0
    versions = ctrl.stats().get("versions", {})
    mine = versions.get(ctrl.current, {}) if isinstance(versions, dict) else {}
    total = sum(v.get("requests", 0) for v in versions.values() if isinstance(v, dict))
    waiting = ctrl.endpoint.take_waiting()
    # The router's counters restart at each PUT: any change (or a restart at a lower count
    # with traffic) means requests arrived.
    fresh = total != memory.get("requests", 0)
    # A batch deployment's clients wait by design: it scales on its queues alone.
    timed = fresh and ctrl.spec.tier != "batch"
    if fresh or waiting or running or any(queue.values()):
        memory["last_request"] = now
    memory["requests"] = total
    # A replica that just started (scaled up, woken, replacing a dead one) gets the whole idle
    # period to see traffic before it may be scaled to zero.
    changed = -math.inf if ctrl.last_change is None else ctrl.last_change
    quiet_since = max(memory.setdefault("last_request", now), changed)
    idle = now - quiet_since
    return Signals(
        replicas=ctrl.count(),
        queue=queue,
        running=running,
        # TTFT only while requests arrive: the router's window keeps a burst's latencies until
        # the next PUT, and they say nothing about a deployment that has gone quiet.
        ttft_p50_ms=_number(mine.get("ttft_ms_p50")) if timed else None,
        ttft_p99_ms=_number(mine.get("ttft_ms_p99")) if timed else None,
        idle_s=idle,
        waiting=waiting,
        silent=silent,
    )


def autoscale(ctrl: Controller, now: float | None = None) -> Decision:
    """One autoscaler step for `ctrl`'s current version, applied and logged."""
    now = time.monotonic() if now is None else now
    signals = read_signals(ctrl, now)
    since = None if ctrl.last_change is None else now - ctrl.last_change
    spec = ctrl.spec
    decision = decide(spec.autoscale, spec.replicas, spec.slo, signals, since)
    entry: dict[str, Any] = {
        "kind": "autoscale",
        "version": ctrl.current,
        "action": decision.action,
        "from": signals.replicas,
        "to": decision.target,
        "reason": decision.reason,
        "inputs": decision.inputs,
    }
    ctrl.records.log(spec.name, entry)
    ctrl.events["shipyard_serve_deploy_autoscale_decisions_total", decision.action] += 1
    if decision.target > signals.replicas:
        ctrl.grow(ctrl.current, decision.target - signals.replicas)
        ctrl.push()
    elif decision.target < signals.replicas:
        ctrl.shrink(ctrl.current, signals.replicas - decision.target)
    if decision.target != signals.replicas:
        ctrl.last_change = now
        ctrl.scaling["requests"] = 0  # the PUT restarted the router's counters
    return decision


def _number(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if ok else None
