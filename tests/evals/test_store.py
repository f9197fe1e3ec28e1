"""The result store and triggers on both database engines (no model needed)."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from shipyard.evals import (
    ResultStore,
    RunKey,
    TriggerPolicy,
    get_task,
    on_checkpoint,
    plan,
    watch,
)
from shipyard.evals.scoring import Score
from shipyard.evals.store import judge_version
from shipyard.queue import Queue, open_queue
from shipyard.workspace import Workspace

MODEL = "ab" * 32


@pytest.fixture
def db_queue(db_url: str) -> Iterator[Queue]:
    q = open_queue(db_url)
    yield q
    q.close()


def test_outputs_and_scores_are_kept_once_and_rescored(db_queue: Queue) -> None:
    store = ResultStore(db_queue.db)
    task = get_task("arith-gen")
    run = store.add_run(RunKey.of(MODEL, task), "arith-gen", 3)
    assert store.add_run(RunKey.of(MODEL, task), "arith-gen", 3) == run  # idempotent
    judge = judge_version(task)
    for item in task.load()[:3]:
        with db_queue.db.transaction():
            ResultStore.record(
                db_queue.db,
                run,
                judge,
                item.id,
                item.cluster,
                {"text": f" {item.target}"},
                Score(1.0, "correct"),
            )
    with db_queue.db.transaction():  # a second write of the same item changes nothing
        item = task.load()[0]
        ResultStore.record(
            db_queue.db, run, judge, item.id, item.cluster, {"text": "9"}, Score(0.0, "wrong")
        )
    rows = store.scores(run, judge)
    assert [r.score for r in rows] == [1.0, 1.0, 1.0]
    assert store.outputs(run)[item.id] == {"text": f" {item.target}"}
    assert store.rescore(task, run, judge="numeric:9:1") == 3
    assert store.latest_judge(run) == "numeric:9:1"
    assert [r.outcome for r in store.scores(run, "numeric:9:1")] == ["correct"] * 3
    assert [r["run_key"] for r in store.runs(MODEL)] == [run]


def test_checkpoint_triggers_follow_the_policy_once_per_checkpoint(db_queue: Queue) -> None:
    policy = TriggerPolicy(fast=("rg-basic-arithmetic",), full=("rg-leg-counting",), full_every=2)
    first = on_checkpoint(db_queue, policy, "run:7", "01" * 32)
    assert [p.task for p in first] == ["rg-basic-arithmetic"]
    assert on_checkpoint(db_queue, policy, "run:7", "01" * 32) == []  # seen: nothing again
    second = on_checkpoint(db_queue, policy, "run:7", "02" * 32)
    assert [p.task for p in second] == ["rg-basic-arithmetic", "rg-leg-counting"]
    promoted = on_checkpoint(db_queue, policy, "run:7", "03" * 32, promotion_candidate=True)
    assert [p.task for p in promoted] == ["rg-basic-arithmetic", "rg-leg-counting"]
    assert all(p.enqueued == 100 for p in second)


def test_plan_is_idempotent(db_queue: Queue, tmp_path: Path) -> None:
    (a,) = plan(db_queue, MODEL, ["rg-basic-arithmetic"], limit=10)
    (b,) = plan(db_queue, MODEL, ["rg-basic-arithmetic"], limit=10)
    assert (a.enqueued, b.enqueued, a.run_key) == (10, 0, b.run_key)


def test_watch_triggers_every_move_of_an_alias(
    workspace: Workspace, queue: Queue, tmp_path: Path
) -> None:
    for n in range(2):
        source = tmp_path / f"model{n}"
        source.mkdir()
        (source / "config.json").write_text(f'{{"n": {n}}}')
        workspace.put(source, "model", name="candidate")
    policy = TriggerPolicy(fast=("rg-basic-arithmetic",), full=("rg-leg-counting",), full_every=2)
    passes = iter([False, False, True])  # two polls: the second finds nothing new
    said: list[str] = []
    watch(workspace, queue, "candidate", policy, 0.0, lambda: next(passes), said.append)
    assert len(said) == 3 and said[-1].endswith("rg-leg-counting: 100 items enqueued")
