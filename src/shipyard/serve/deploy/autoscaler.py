"""The autoscaler's policy: signals in, a replica count and its reason out. Pure: no clock, no I/O.

Rules, in order (docs/serving-deploy.md, "Autoscaler"):
1. outside [min, max]: move inside;
2. at zero: wake to max(1, min) on the first sign of demand (a held or refused request, a queue);
3. pressure (weighted queue per replica above `queue_up`, or TTFT p50/p99 above `ttft_up` of its
   SLO): add replicas, enough for the queue to fall to `queue_up` each, at most `max_step`, not
   within `up_cooldown_s` of the last change;
4. a replica that did not answer /health: hold (never scale down on queues not known);
   idle (no request for `idle_to_zero_s`, nothing queued or running, `min` 0): scale to zero;
5. slack (the queue would stay under `queue_down` per replica with one replica fewer, and TTFT
   under `ttft_down` of its SLO): remove one, not within `down_cooldown_s` of the last change;
6. otherwise hold.
The up target never exceeds what the queue needs (ceil(queue / queue_up)) and the down rule looks
at the queue per replica *after* the removal, so a steady signal never makes it flap.
"""

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from shipyard.serve.deploy.spec import Autoscale, Replicas, Slo

# A queued batch request weighs a quarter of an interactive or standard one: batch traffic is
# shed first and tolerates waiting, so it alone should not buy replicas as fast.
TIER_WEIGHTS: Mapping[str, float] = {"interactive": 1.0, "standard": 1.0, "batch": 0.25}

Action = Literal["up", "down", "hold", "zero", "wake"]


@dataclass(frozen=True)
class Signals:
    """What the controller read this tick for one deployment's current version."""

    replicas: int  # live replicas now
    queue: Mapping[str, int] = field(default_factory=dict)  # queued requests per tier, summed
    running: int = 0  # requests being generated, summed over replicas
    ttft_p50_ms: float | None = None  # None: no sample since the window opened
    ttft_p99_ms: float | None = None
    idle_s: float = 0.0  # seconds since the router last saw a request for this deployment
    waiting: int = 0  # requests the router turned away (503) while there was no replica
    silent: int = 0  # replicas whose /health did not answer: their queues are unknown


@dataclass(frozen=True)
class Decision:
    action: Action
    target: int
    reason: str
    inputs: dict[str, Any]


def weighted_queue(queue: Mapping[str, int]) -> float:
    return sum(TIER_WEIGHTS.get(tier, 1.0) * max(0, depth) for tier, depth in queue.items())


def decide(
    auto: Autoscale,
    bounds: Replicas,
    slo: Slo,
    signals: Signals,
    since_change_s: float | None,
) -> Decision:
    """The replica count for the next tick. `since_change_s`: None if it never changed."""
    now = signals.replicas
    queued = weighted_queue(signals.queue)
    inputs = {**asdict(signals), "queue": dict(signals.queue), "weighted_queue": queued}
    inputs["since_change_s"] = since_change_s

    def made(action: Action, target: int, reason: str) -> Decision:
        return Decision(action, target, reason, inputs)

    if now < bounds.min:
        return made("up", bounds.min, f"{now} replicas is below min {bounds.min}")
    if now > bounds.max:
        return made("down", bounds.max, f"{now} replicas is above max {bounds.max}")
    if now == 0:
        if signals.waiting or queued or signals.running:
            return made("wake", max(1, bounds.min), "a request arrived while at zero replicas")
        return made("hold", 0, "at zero, no demand")
    cooled_up = since_change_s is None or since_change_s >= auto.up_cooldown_s
    cooled_down = since_change_s is None or since_change_s >= auto.down_cooldown_s
    hot = _ttft_over(signals, slo, auto.ttft_up)
    if queued / now > auto.queue_up or hot:
        if now >= bounds.max:
            return made("hold", now, f"under pressure but at max {bounds.max}")
        if not cooled_up:
            return made("hold", now, f"under pressure, in up cool-down ({auto.up_cooldown_s} s)")
        need = max(now + 1, math.ceil(queued / auto.queue_up))
        target = min(bounds.max, need, now + auto.max_step)
        why = hot or f"queue {queued:g} over {auto.queue_up:g} per replica"
        return made("up", target, why)
    if signals.silent:
        return made("hold", now, f"{signals.silent} replica(s) did not report: queues unknown")
    if (
        auto.idle_to_zero_s is not None
        and bounds.min == 0
        and signals.idle_s >= auto.idle_to_zero_s
        and not queued
        and not signals.running
        and not signals.waiting
    ):
        return made("zero", 0, f"no request for {signals.idle_s:.0f} s")
    floor = max(bounds.min, 1)
    calm = _ttft_over(signals, slo, auto.ttft_down) is None
    if now > floor and calm and queued / (now - 1) < auto.queue_down:
        if not cooled_down:
            return made("hold", now, f"slack, in down cool-down ({auto.down_cooldown_s} s)")
        return made("down", now - 1, f"queue {queued:g} fits {now - 1} replicas under the low mark")
    return made("hold", now, "within thresholds")


def _ttft_over(signals: Signals, slo: Slo, fraction: float) -> str | None:
    """Which TTFT percentile is above `fraction` of its SLO, if any (a reason for the log)."""
    for label, value, bound in (
        ("p50", signals.ttft_p50_ms, slo.ttft_ms_p50),
        ("p99", signals.ttft_p99_ms, slo.ttft_ms_p99),
    ):
        if value is not None and value > fraction * bound:
            return f"TTFT {label} {value:.0f} ms over {fraction:g} of the {bound:.0f} ms SLO"
    return None
