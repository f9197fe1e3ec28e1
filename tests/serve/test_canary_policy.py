"""The canary state machine, with injected metrics and eval-gate decisions."""

import math

import pytest

from shipyard.evals.gate import GateDecision, TaskVerdict
from shipyard.evals.stats import Estimate
from shipyard.serve.deploy.canary import (
    Evals,
    Rollout,
    StageMetrics,
    Verdict,
    candidate_weight,
    judge,
    rolled_back,
    step,
)
from shipyard.serve.deploy.spec import Canary, Slo

CANARY = Canary(hold_s=10, min_requests=5, max_stage_s=100)
SLO = Slo(ttft_ms_p50=100, ttft_ms_p99=500, error_rate=0.05)
SAME = Estimate(0.9, 0.03, 100, 0)
GOOD = GateDecision(
    True, (TaskVerdict("arith-mc", SAME, SAME, Estimate(0.0, 0.0, 100, 0), True),), "passed"
)
WORSE = GateDecision(False, (), "candidate worse on arith-mc")


def test_stage_waits_for_hold_and_requests_then_passes() -> None:
    assert judge(CANARY, SLO, 5, StageMetrics(50), GOOD).outcome == "wait"
    assert judge(CANARY, SLO, 20, StageMetrics(2), GOOD).outcome == "wait"
    assert judge(CANARY, SLO, 20, StageMetrics(5, 0, 50, 300), GOOD).outcome == "pass"
    starved = judge(CANARY, SLO, 101, StageMetrics(2), GOOD)
    assert starved.outcome == "fail" and "fewer than the 5" in starved.reason


@pytest.mark.parametrize(
    ("metrics", "evals", "why"),
    [
        (StageMetrics(20, 2), GOOD, "error rate 2/20 over the SLO's 0.05"),
        (StageMetrics(20, 0, 150, 200), GOOD, "TTFT p50 150 ms over the SLO's 100 ms"),
        (StageMetrics(20, 0, 50, 900), "pending", "TTFT p99 900 ms over the SLO's 500 ms"),
        (StageMetrics(20), WORSE, "eval gate: candidate worse on arith-mc"),
    ],
)
def test_a_failed_gate_fails_the_stage_at_once(
    metrics: StageMetrics, evals: Evals, why: str
) -> None:
    verdict = judge(CANARY, SLO, 0.0, metrics, evals)
    assert verdict.outcome == "fail" and why in verdict.reason  # before the hold: fail fast


def test_no_stage_passes_before_the_eval_gate_decides() -> None:
    waiting = judge(CANARY, SLO, 20, StageMetrics(5), "pending")
    assert waiting.outcome == "wait" and "eval gate" in waiting.reason
    late = judge(CANARY, SLO, 101, StageMetrics(5), "pending")
    assert late.outcome == "fail" and "eval gate not decided" in late.reason
    assert judge(CANARY, SLO, 20, StageMetrics(5), GOOD).outcome == "pass"
    assert judge(CANARY, SLO, 20, StageMetrics(5), None).outcome == "pass"  # no gate
    assert math.isfinite(GOOD.verdicts[0].delta.se)


def test_walks_the_stages_and_promotes_at_the_last() -> None:
    stages = (1.0, 5.0, 25.0, 100.0)
    rollout = Rollout("a" * 64, "b" * 64, stage_started=0)
    weights = [candidate_weight(rollout, stages)]
    for now in (10.0, 20.0, 30.0):
        rollout = step(rollout, stages, Verdict("wait", ""), now)  # waiting changes nothing
        rollout = step(rollout, stages, Verdict("pass", "ok"), now)
        weights.append(candidate_weight(rollout, stages))
    assert weights == [0.01, 0.05, 0.25, 1.0]
    assert rollout.status == "promoted" and [h["stage"] for h in rollout.history] == [1, 5, 25]
    assert step(rollout, stages, Verdict("fail", "late"), 40) == rollout  # final stays final


def test_a_failure_rolls_back_and_gives_the_candidate_no_traffic() -> None:
    stages = (1.0, 5.0, 25.0, 100.0)
    rollout = step(Rollout("a" * 64, "b" * 64), stages, Verdict("pass", "ok"), 1)
    rollout = step(rollout, stages, Verdict("fail", "eval gate: 0/20"), 2)
    assert rollout.status == "rolled_back" and rollout.reason == "eval gate: 0/20"
    assert candidate_weight(rollout, stages) == 0.0
    operator = rolled_back(Rollout("a" * 64, "b" * 64), "by hand", 3)
    assert operator.status == "rolled_back" and operator.history[-1]["reason"] == "by hand"
