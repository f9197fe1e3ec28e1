"""The paired regression gate (`evals.gate.judge`) on results written into the store."""

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from shipyard.errors import InvalidInput, NotFound
from shipyard.evals import ResultStore, RunKey
from shipyard.evals.gate import evaluate, judge, pending
from shipyard.evals.scoring import Score
from shipyard.evals.stats import estimate
from shipyard.evals.store import judge_version
from shipyard.evals.tasks import Item, Task, register
from shipyard.queue import Queue
from shipyard.workspace import Workspace

CANDIDATE, BASELINE = "c" * 64, "b" * 64
ITEMS = tuple(Item(f"q{n:03}", {"q": f"question {n}"}, 0, ("yes", "no")) for n in range(100))
TASK = register(Task("gate-test-mc", "1", "mc", "{q}", "mc", load=lambda: ITEMS, judge_version="1"))


def store_run(queue: Queue, model: str, scores: Sequence[float], items: int | None = None) -> str:
    """`model`'s run of TASK with `scores` for its first items; the run declares `items`."""
    store = ResultStore(queue.db)
    run = store.add_run(RunKey.of(model, TASK), TASK.name, len(scores) if items is None else items)
    with queue.db.transaction():
        for item, value in zip(ITEMS, scores, strict=False):
            outcome = "correct" if value else "wrong"
            output = {"logprobs": [0.0, -1.0]}
            ResultStore.record(
                queue.db, run, judge_version(TASK), item.id, None, output, Score(value, outcome)
            )
    return run


def test_identical_models_pass(queue: Queue) -> None:
    scores = [1.0 if n % 3 else 0.0 for n in range(100)]
    store_run(queue, CANDIDATE, scores)
    store_run(queue, BASELINE, scores)
    decision = judge(ResultStore(queue.db), CANDIDATE, BASELINE, [TASK.name])
    assert decision.passed and decision.verdicts[0].passed
    assert decision.verdicts[0].delta.mean == 0.0 and decision.verdicts[0].delta.se == 0.0
    # a model judged against itself: the same run on both sides
    assert judge(ResultStore(queue.db), BASELINE, BASELINE, [TASK.name]).passed


def test_a_clearly_worse_candidate_fails_with_the_task_named(queue: Queue) -> None:
    store_run(queue, BASELINE, [1.0] * 100)
    store_run(queue, CANDIDATE, [1.0 if n % 2 else 0.0 for n in range(100)])
    decision = judge(ResultStore(queue.db), CANDIDATE, BASELINE, [TASK.name])
    assert not decision.passed
    (verdict,) = decision.verdicts
    assert verdict.task == TASK.name and not verdict.passed
    assert verdict.candidate.mean == 0.5 and verdict.baseline.mean == 1.0
    assert verdict.delta.mean == -0.5 and verdict.delta.n == 100
    assert "gate-test-mc 0.5000 vs 1.0000" in decision.reason
    assert decision.as_json()["verdicts"][0]["delta"]["mean"] == -0.5
    # tolerated when the allowed drop covers it
    assert judge(ResultStore(queue.db), CANDIDATE, BASELINE, [TASK.name], max_drop=0.5).passed


def test_the_paired_error_decides_where_unpaired_errors_overlap(queue: Queue) -> None:
    """Right on the baseline's 60 items but 8: the two means' 95% intervals overlap, yet the
    per-item difference is consistently negative and its paired error small."""
    baseline = [1.0 if n < 60 else 0.0 for n in range(100)]
    candidate = [1.0 if n < 52 else 0.0 for n in range(100)]
    store_run(queue, BASELINE, baseline)
    store_run(queue, CANDIDATE, candidate)
    base, cand = estimate(baseline), estimate(candidate)
    unpaired_se = math.hypot(base.se, cand.se)
    assert base.mean - cand.mean < 1.96 * unpaired_se  # no significant drop unpaired
    decision = judge(ResultStore(queue.db), CANDIDATE, BASELINE, [TASK.name])
    (verdict,) = decision.verdicts
    assert not decision.passed
    assert math.isclose(verdict.delta.mean, -0.08)
    assert verdict.delta.se < unpaired_se / 1.5
    assert verdict.delta.mean + 1.96 * verdict.delta.se < 0
    # a smaller drop than the error margin passes: 1 item of 100
    store_run(queue, "d" * 64, [1.0 if n < 59 else 0.0 for n in range(100)])
    assert judge(ResultStore(queue.db), "d" * 64, BASELINE, [TASK.name]).passed


def test_one_item_the_mean_alone_decides(queue: Queue) -> None:
    store_run(queue, BASELINE, [1.0])
    store_run(queue, CANDIDATE, [0.0])
    store_run(queue, "d" * 64, [1.0])
    store = ResultStore(queue.db)
    worse = judge(store, CANDIDATE, BASELINE, [TASK.name])
    assert not worse.passed and math.isnan(worse.verdicts[0].delta.se)
    assert "SE undefined" in worse.reason
    assert judge(store, "d" * 64, BASELINE, [TASK.name]).passed
    assert judge(store, BASELINE, CANDIDATE, [TASK.name]).passed  # better passes


def test_missing_or_incomplete_runs_are_named(queue: Queue) -> None:
    store = ResultStore(queue.db)
    store_run(queue, BASELINE, [1.0] * 10)
    with pytest.raises(NotFound, match=f"gate-test-mc: no eval run for model {'c' * 16}"):
        judge(store, CANDIDATE, BASELINE, [TASK.name])
    run = store_run(queue, CANDIDATE, [1.0] * 9, items=10)
    with pytest.raises(InvalidInput, match=f"run {run} .* not complete: 9 of 10 items scored"):
        judge(store, CANDIDATE, BASELINE, [TASK.name])
    with pytest.raises(NotFound, match="no eval task named 'no-such-task'"):
        judge(store, CANDIDATE, BASELINE, ["no-such-task"])
    with pytest.raises(InvalidInput, match="at least one task"):
        judge(store, CANDIDATE, BASELINE, [])
    with pytest.raises(InvalidInput, match="max_drop"):
        judge(store, BASELINE, BASELINE, [TASK.name], max_drop=-1)


def test_evaluate_plans_works_and_judges_two_real_models(
    queue: Queue, workspace: Workspace, put_tiny: Callable[[int], str], tmp_path: Path
) -> None:
    path = tmp_path / "tiny.jsonl"
    items = [
        {"id": f"q{n}", "question": f"{n} is", "choices": ["odd", "even"], "answer": n % 2}
        for n in range(6)
    ]
    path.write_text("".join(json.dumps(i) + "\n" for i in items))
    a, b = put_tiny(0), put_tiny(1)
    ref = f"jsonl:{path}"
    decision = evaluate(queue, workspace, a, b, [ref], max_drop=1.0)
    assert decision.passed and decision.verdicts[0].delta.n == 6
    assert not pending(queue, a) and not pending(queue, b)
    store = ResultStore(queue.db)
    assert [r["task"] for r in store.runs(a)] == [r["task"] for r in store.runs(b)] == ["tiny"]
    # judged again from the store alone: the same decision
    assert judge(store, a, b, [ref], max_drop=1.0) == decision
