"""Runs end to end on a tiny model: plan, work, resume, keys, re-scoring, reports, lineage."""

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from shipyard.evals import (
    ResultStore,
    compare,
    get_task,
    model_report,
    plan,
    put_report,
    queue_name,
    work,
)
from shipyard.evals.store import judge_version
from shipyard.queue import Queue
from shipyard.serve.engine import LocalEngine
from shipyard.workspace import Workspace


def _mc_file(path: Path, template: str) -> Path:
    lines = [json.dumps({"task": {"name": "toy-mc", "template": template}})]
    for n in range(12):
        lines.append(
            json.dumps(
                {
                    "id": f"q{n}",
                    "question": f"Which number follows {n}?",
                    "choices": [str(n + 1), str(n + 2), str(n - 1)],
                    "answer": 0,
                    "cluster": f"c{n % 3}",
                }
            )
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def test_run_resumes_and_never_runs_a_finished_item_again(
    queue: Queue, workspace: Workspace, put_tiny: Callable[[int], str]
) -> None:
    model = put_tiny(0)
    (first,) = plan(queue, model, ["arith-mc"], limit=20)
    assert (first.items, first.enqueued) == (20, 20)
    stats = work(queue, workspace, model, batch=8)
    assert (stats.completed, stats.failed) == (20, 0)
    store = ResultStore(queue.db)
    task = get_task("arith-mc")
    rows = store.scores(first.run_key, judge_version(task))
    assert len(rows) == 20 and {r.outcome for r in rows} <= {"correct", "wrong"}
    assert {r.cluster for r in rows} <= {"add", "sub", "mul"}
    # planning again adds nothing, and a worker finds nothing to do
    (again,) = plan(queue, model, ["arith-mc"], limit=20)
    assert (again.run_key, again.enqueued) == (first.run_key, 0)
    assert work(queue, workspace, model).completed == 0
    # an item queued again under another key (a replayed plan) is completed without running
    payload = {"run": first.run_key, "task": "arith-mc", "item": "arith-0"}
    queue.enqueue(queue_name(model), payload, key="replayed")
    again_stats = work(queue, workspace, model)
    assert (again_stats.completed, again_stats.skipped) == (0, 1)
    assert len(store.scores(first.run_key, judge_version(task))) == 20
    # a larger limit enqueues only the new items
    (more,) = plan(queue, model, ["arith-mc"], limit=25)
    assert more.enqueued == 5
    assert work(queue, workspace, model).completed == 5


def test_changed_template_is_a_new_key_never_a_mixed_score(
    queue: Queue, workspace: Workspace, put_tiny: Callable[[int], str], tmp_path: Path
) -> None:
    model = put_tiny(0)
    old = _mc_file(tmp_path / "old.jsonl", "Q: {question}\nA:")
    new = _mc_file(tmp_path / "new.jsonl", "Question: {question}\nAnswer:")
    (a,) = plan(queue, model, [f"jsonl:{old}"])
    work(queue, workspace, model)
    (b,) = plan(queue, model, [f"jsonl:{new}"])
    assert a.run_key != b.run_key and b.enqueued == 12  # nothing reused across templates
    work(queue, workspace, model)
    report = model_report(ResultStore(queue.db), model)
    lines = {r["run_key"]: r for r in report["runs"]}
    assert set(lines) == {a.run_key, b.run_key}
    assert lines[a.run_key]["key"]["template_hash"] != lines[b.run_key]["key"]["template_hash"]
    assert all(r["scored"] == 12 and r["clusters"] == 3 for r in lines.values())


def test_rescore_reads_stored_outputs_without_the_model(
    queue: Queue, workspace: Workspace, put_tiny: Callable[[int], str]
) -> None:
    model = put_tiny(0)
    (run,) = plan(queue, model, ["arith-gen"], limit=6)
    work(queue, workspace, model)
    store = ResultStore(queue.db)
    task = get_task("arith-gen")
    before = store.scores(run.run_key, judge_version(task))
    # a new judge version scores the same stored outputs; the old scores stay as they were
    assert store.rescore(task, run.run_key, judge="numeric:2:1") == 6
    assert store.rescore(task, run.run_key, judge="numeric:2:1") == 0
    after = store.scores(run.run_key, "numeric:2:1")
    assert [(r.item_id, r.score) for r in after] == [(r.item_id, r.score) for r in before]
    assert store.scores(run.run_key, judge_version(task)) == before


def test_report_is_an_artifact_downstream_of_its_model_and_compare_is_paired(
    queue: Queue, workspace: Workspace, put_tiny: Callable[[int], str]
) -> None:
    a, b = put_tiny(0), put_tiny(1)
    (run_a,) = plan(queue, a, ["arith-mc"], limit=16)
    (run_b,) = plan(queue, b, ["arith-mc"], limit=16)
    work(queue, workspace, a)
    work(queue, workspace, b)
    store = ResultStore(queue.db)
    report_id = put_report(workspace, model_report(store, a))
    assert workspace.catalog.get_artifact(report_id).kind == "eval-report"  # type: ignore[union-attr]
    up = {e.parent for e in workspace.catalog.lineage(report_id, "up")}
    assert a in up
    diff = compare(store, run_a.run_key, run_b.run_key)
    assert diff["same_key_except_model"] and diff["difference"]["n"] == 16
    mean_a = model_report(store, a)["runs"][0]["mean"]
    mean_b = model_report(store, b)["runs"][0]["mean"]
    assert diff["difference"]["mean"] == pytest.approx(mean_a - mean_b)


def test_loglikelihoods_together_equal_alone_and_a_full_pass(
    tiny_llama_dirs: Callable[[int], Path],
) -> None:
    pairs = [
        ("Question: What is 2 + 2?\nAnswer:", " 4"),
        ("A much longer context that pads the rest of the batch on the right side", " yes"),
        ("", "hello"),
        ("trailing space ", "moves"),
        ("x", " a longer continuation of several tokens"),
    ]
    with LocalEngine(tiny_llama_dirs(0)) as engine:
        alone = [engine.loglikelihoods([p])[0] for p in pairs]
        together = engine.loglikelihoods(pairs)
        for one, many in zip(alone, together, strict=True):
            assert abs(one.logprob - many.logprob) < 1e-4 and one.greedy == many.greedy
        # and both equal the plain full-logits computation
        import torch

        context, continuation = engine.encode_pair(*pairs[0])
        ids = torch.tensor([context + continuation])
        with torch.no_grad():
            logits = engine.loaded.model(input_ids=ids).logits[0].log_softmax(-1)
    positions = range(len(context) - 1, len(context) + len(continuation) - 1)
    plain = sum(float(logits[p, t]) for p, t in zip(positions, continuation, strict=True))
    assert abs(plain - together[0].logprob) < 1e-4


def test_a_task_changed_after_planning_stores_nothing_under_the_old_key(
    queue: Queue, workspace: Workspace, put_tiny: Callable[[int], str], tmp_path: Path
) -> None:
    model = put_tiny(0)
    path = _mc_file(tmp_path / "task.jsonl", "Q: {question}\nA:")
    (run,) = plan(queue, model, [f"jsonl:{path}"])
    _mc_file(path, "Question: {question}\nAnswer:")  # edited before any worker ran it
    stats = work(queue, workspace, model)
    assert stats.completed == 0 and stats.failed == 3 * 12  # every attempt refused
    assert ResultStore(queue.db).done_items(run.run_key) == set()
    dead = queue.dead(queue_name(model))
    assert len(dead) == 12 and "changed since run" in str(dead[0].history[-1].reason)
    (line,) = model_report(ResultStore(queue.db), model)["runs"]  # the report says why
    assert line["scored"] == 0 and line["dead"] == 12
    assert sorted(d["item"] for d in line["dead_items"]) == sorted(f"q{n}" for n in range(12))
    assert all("changed since run" in d["reason"] for d in line["dead_items"])
