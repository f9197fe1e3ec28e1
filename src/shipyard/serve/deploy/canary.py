"""The canary's state machine: judge a stage from its metrics, then advance or roll back. Pure.

A rollout walks `canary.stages` (percent of traffic on the candidate, e.g. 1, 5, 25, 100). Each
stage before the last is held for `hold_s` and judged on the candidate's error rate, its TTFT
against the SLO and the eval gate (`evals.gate`: candidate vs current on eval-platform tasks, by
the paired rule; decided once per rollout, and no stage passes before it is). A failed judgement
rolls back at once; the last stage (100) is the promotion itself: the alias moves by
compare-and-swap, then all traffic goes to the candidate.
"""

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from shipyard.evals.gate import GateDecision
from shipyard.serve.deploy.spec import Canary, Slo

Outcome = Literal["wait", "pass", "fail"]
Status = Literal["running", "promoted", "rolled_back"]
# The eval gate's state: its decision, "pending" while the versions are evaluated, None: no gate
Evals = GateDecision | Literal["pending"] | None


@dataclass(frozen=True)
class StageMetrics:
    """The candidate's traffic since this stage began (the router's per-version stats)."""

    requests: int = 0
    errors: int = 0
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    reason: str


@dataclass(frozen=True)
class Rollout:
    """One move of a deployment from `current` to `candidate` (artifact ids), as persisted."""

    current: str
    candidate: str
    stage: int = 0  # index into canary.stages
    stage_started: float = 0.0  # wall-clock seconds
    began: float = 0.0  # when the rollout began: tells two rollouts to one candidate apart
    status: Status = "running"
    reason: str = ""
    history: tuple[dict[str, Any], ...] = field(default_factory=tuple)


def candidate_weight(rollout: Rollout, stages: tuple[float, ...]) -> float:
    """The candidate's share of traffic now: its stage while running, else 1 or 0."""
    if rollout.status == "running":
        return stages[rollout.stage] / 100
    return 1.0 if rollout.status == "promoted" else 0.0


def judge(
    canary: Canary, slo: Slo, elapsed_s: float, metrics: StageMetrics, evals: Evals
) -> Verdict:
    """Fail as soon as a gate fails; pass once held long enough with enough traffic and the
    eval gate (if any) decided."""
    if metrics.requests and metrics.errors / metrics.requests > slo.error_rate:
        return Verdict(
            "fail",
            f"error rate {metrics.errors}/{metrics.requests} over the SLO's {slo.error_rate:g}",
        )
    for label, value, bound in (
        ("p50", metrics.ttft_p50_ms, slo.ttft_ms_p50),
        ("p99", metrics.ttft_p99_ms, slo.ttft_ms_p99),
    ):
        if value is not None and value > bound:
            return Verdict("fail", f"TTFT {label} {value:.0f} ms over the SLO's {bound:.0f} ms")
    if isinstance(evals, GateDecision) and not evals.passed:
        return Verdict("fail", f"eval gate: {evals.reason}")
    if elapsed_s < canary.hold_s:
        return Verdict("wait", f"held {elapsed_s:.1f} of {canary.hold_s:g} s")
    if metrics.requests < canary.min_requests:
        if elapsed_s >= canary.max_stage_s:
            return Verdict(
                "fail",
                f"{metrics.requests} candidate requests in {elapsed_s:.0f} s, "
                f"fewer than the {canary.min_requests} a stage needs",
            )
        return Verdict("wait", f"{metrics.requests} of {canary.min_requests} requests")
    if evals == "pending":
        if elapsed_s >= canary.max_stage_s:
            return Verdict("fail", f"eval gate not decided in {elapsed_s:.0f} s (max_stage_s)")
        return Verdict("wait", "eval gate: evaluating both versions")
    return Verdict("pass", f"stage passed ({metrics.requests} requests, {metrics.errors} errors)")


def step(rollout: Rollout, stages: tuple[float, ...], verdict: Verdict, now: float) -> Rollout:
    """The rollout after `verdict` on its current stage. `pass` into the last stage promotes."""
    if rollout.status != "running" or verdict.outcome == "wait":
        return rollout
    entry = {"stage": stages[rollout.stage], "outcome": verdict.outcome, "reason": verdict.reason}
    history = (*rollout.history, {**entry, "time": now})
    if verdict.outcome == "fail":
        return replace(rollout, status="rolled_back", reason=verdict.reason, history=history)
    following = rollout.stage + 1
    if following == len(stages) - 1:
        promoted = replace(rollout, stage=following, status="promoted", history=history)
        return replace(promoted, reason="every stage passed")
    return replace(rollout, stage=following, stage_started=now, history=history)


def rolled_back(rollout: Rollout, reason: str, now: float) -> Rollout:
    """An operator's rollback or a failed alias move: back to the current version."""
    entry = {"stage": rollout.stage, "outcome": "fail", "reason": reason, "time": now}
    return replace(rollout, status="rolled_back", reason=reason, history=(*rollout.history, entry))
