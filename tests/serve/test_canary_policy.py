"""The canary state machine and the eval gate's item parser, with injected metrics."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shipyard.errors import InvalidInput
from shipyard.serve.deploy.canary import (
    Rollout,
    StageMetrics,
    Verdict,
    candidate_weight,
    judge,
    rolled_back,
    step,
)
from shipyard.serve.deploy.evalgate import Item, Score, parse_items, passes, score
from shipyard.serve.deploy.spec import Canary, EvalGate, Slo

CANARY = Canary(hold_s=10, min_requests=5, max_stage_s=100)
SLO = Slo(ttft_ms_p50=100, ttft_ms_p99=500, error_rate=0.05)
GATE = EvalGate(max_drop=0.1, min_score=0.5)
GOOD = (Score(9, 10, (3,)), Score(9, 10, (3,)))


def test_stage_waits_for_hold_and_requests_then_passes() -> None:
    assert judge(CANARY, SLO, GATE, 5, StageMetrics(50), GOOD).outcome == "wait"
    assert judge(CANARY, SLO, GATE, 20, StageMetrics(2), GOOD).outcome == "wait"
    assert judge(CANARY, SLO, GATE, 20, StageMetrics(5, 0, 50, 300), GOOD).outcome == "pass"
    starved = judge(CANARY, SLO, GATE, 101, StageMetrics(2), GOOD)
    assert starved.outcome == "fail" and "fewer than the 5" in starved.reason


@pytest.mark.parametrize(
    ("metrics", "scores", "why"),
    [
        (StageMetrics(20, 2), GOOD, "error rate 2/20 over the SLO's 0.05"),
        (StageMetrics(20, 0, 150, 200), GOOD, "TTFT p50 150 ms over the SLO's 100 ms"),
        (StageMetrics(20, 0, 50, 900), GOOD, "TTFT p99 900 ms over the SLO's 500 ms"),
        (StageMetrics(20), (Score(7, 10, (1, 2, 3)), Score(9, 10, ())), "eval gate: 7/10 vs 9/10"),
        (StageMetrics(20), (Score(4, 10, ()), Score(4, 10, ())), "under the minimum 0.5"),
    ],
)
def test_a_failed_gate_fails_the_stage_at_once(
    metrics: StageMetrics, scores: tuple[Score, Score], why: str
) -> None:
    verdict = judge(CANARY, SLO, GATE, 0.0, metrics, scores)  # before the hold: fail fast
    assert verdict.outcome == "fail" and why in verdict.reason


def test_within_the_allowed_drop_passes() -> None:
    scores = (Score(8, 10, (1, 2)), Score(9, 10, (1,)))
    assert judge(CANARY, SLO, GATE, 20, StageMetrics(5), scores).outcome == "pass"
    assert judge(CANARY, SLO, GATE, 20, StageMetrics(5), None).outcome == "pass"  # no gate


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


def test_eval_items_parse_and_score() -> None:
    raw = (
        b'{"prompt": "2+2=", "expected": "4"}\n\n'
        b'{"prompt": "Hi", "expected": "Hi", "match": "exact", "max_tokens": 2}\n'
    )
    items = parse_items(raw)
    assert items == [Item("2+2=", "4"), Item("Hi", "Hi", "exact", 2)]
    assert passes(items[0], " 4 and more") and not passes(items[1], "Hi there")
    result = score(items, lambda item: {"2+2=": "4", "Hi": "Hello"}[item.prompt])
    assert (result.passed, result.total, result.failed, result.fraction) == (1, 2, (2,), 0.5)


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (b"{", "line 1: not JSON"),
        (b"[1]", "line 1: expected an object"),
        (b'{"prompt": "", "expected": "x"}', "prompt (non-empty)"),
        (b'{"prompt": "p", "expected": "x", "match": "regex"}', "allowed exact, contains"),
        (b'{"prompt": "p", "expected": "x", "max_tokens": 0}', "allowed 1 to 256"),
        (b'{"prompt": "p", "expected": "x", "temperature": 1}', "unknown field 'temperature'"),
        (b"\xff", "not UTF-8"),
        (b"\n\n", "no items"),
    ],
)
def test_bad_items_are_named(line: bytes, why: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_items(line, "gate.jsonl")
    assert why in str(caught.value) and "gate.jsonl" in str(caught.value)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["prompt", "expected", "match", "max_tokens", "x"]), inner, max_size=4
        )
    ),
    max_leaves=8,
)


@pytest.mark.fuzz
@settings(max_examples=300, deadline=None)
@given(st.lists(_json.map(json.dumps).map(str.encode) | st.binary(max_size=40), max_size=4))
def test_fuzz_items_only_raise_invalid_input(lines: list[bytes]) -> None:
    try:
        items = parse_items(b"\n".join(lines))
    except InvalidInput:
        return
    assert all(isinstance(i.prompt, str) and 1 <= i.max_tokens <= 256 for i in items)
