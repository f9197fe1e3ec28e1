"""Faults: a SIGKILLed worker's items are retried and nothing is counted twice; a crashed item is
retried alone."""

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
from tests.processes import alive, children_of

from shipyard.evals import EvalWorker, ResultStore, plan, queue_name, work
from shipyard.evals.runner import materialise, warm_engine
from shipyard.queue import Queue
from shipyard.workspace import Workspace


def _wait(condition: Callable[[], Any], what: str, timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _count(queue: Queue, table: str, run_key: str) -> tuple[int, int]:
    (row,) = queue.db.rows(
        f"SELECT COUNT(*), COUNT(DISTINCT item_id) FROM {table} WHERE run_key = ?", (run_key,)
    )
    return int(row[0]), int(row[1])


@pytest.mark.slow
def test_sigkilled_worker_items_are_retried_and_counted_once(
    queue: Queue, workspace: Workspace, put_tiny: Callable[[int], str]
) -> None:
    model = put_tiny(0)
    (run,) = plan(queue, model, ["arith-gen"], limit=24)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    victim = subprocess.Popen(
        [sys.executable, "-m", "shipyard.evals.worker", model, "--batch", "4", "--lease", "3"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    owner_suffix = f":{victim.pid}"
    try:
        _wait(lambda: _count(queue, "eval_outputs", run.run_key)[0] >= 4, "first results")
        # Freeze it while it holds a lease, then kill it: its items are mid-flight.
        held: list[int] = []
        for _ in range(200):
            victim.send_signal(signal.SIGSTOP)
            held = [
                int(r[0])
                for r in queue.db.rows(
                    "SELECT id FROM queue_items WHERE queue = ? AND state = 'leased' "
                    "AND lease_owner LIKE ?",
                    (queue_name(model), f"%{owner_suffix}"),
                )
            ]
            if held:
                break
            victim.send_signal(signal.SIGCONT)
            time.sleep(0.02)
        assert held, "the worker never held a lease"
        victim.send_signal(signal.SIGKILL)
    finally:
        victim.kill()
        victim.wait()
    done_before = _count(queue, "eval_outputs", run.run_key)[0]
    assert done_before < 24
    stats = work(queue, workspace, model, batch=4, lease=3)
    assert stats.completed == 24 - done_before
    assert _count(queue, "eval_outputs", run.run_key) == (24, 24)
    assert _count(queue, "eval_scores", run.run_key) == (24, 24)
    (qstats,) = queue.stats(queue_name(model))
    assert (qstats.done, qstats.completions, qstats.dead) == (24, 24, 0)
    for item_id in held:  # each held item: one expired attempt, then one completion
        outcomes = [a.outcome for a in queue.get(item_id).history]
        assert outcomes == ["expired", "completed"]


def test_a_crashed_item_is_retried_alone(
    queue: Queue,
    workspace: Workspace,
    put_tiny: Callable[[int], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = put_tiny(0)
    (run,) = plan(queue, model, ["arith-gen"], limit=6)
    engine = warm_engine(model, materialise(workspace, model))
    worker = EvalWorker(queue, model, engine, batch=6)
    calls: list[tuple[str, int]] = []
    real = EvalWorker._generate

    def flaky(self: EvalWorker, task: Any, item: Any) -> dict[str, Any]:
        calls.append((item.id, len(calls)))
        if item.id == "arith-2" and sum(1 for i, _ in calls if i == "arith-2") == 1:
            raise RuntimeError("engine fell over")
        return real(self, task, item)

    monkeypatch.setattr(EvalWorker, "_generate", flaky)
    stats = worker.run()
    assert (stats.completed, stats.failed) == (6, 1)
    assert [i for i, _ in calls].count("arith-2") == 2
    assert all([i for i, _ in calls].count(f"arith-{n}") == 1 for n in (0, 1, 3, 4, 5))
    assert _count(queue, "eval_scores", run.run_key) == (6, 6)
    retried = [r for r in queue.items(queue_name(model)) if r.attempts == 2]
    assert [r.payload["item"] for r in retried] == ["arith-2"]
    assert ResultStore(queue.db).done_items(run.run_key) == {f"arith-{n}" for n in range(6)}


def test_a_batch_that_outlasts_its_lease_is_kept_alive(
    queue: Queue,
    workspace: Workspace,
    put_tiny: Callable[[int], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A multiple-choice pass slower than the lease (a loaded machine): the heartbeat renews
    the batch's leases, so every item completes and none is refused as stale."""
    model = put_tiny(0)
    (run,) = plan(queue, model, ["arith-mc"], limit=6)
    engine = warm_engine(model, materialise(workspace, model))
    worker = EvalWorker(queue, model, engine, batch=6, lease=1.0)
    real = EvalWorker._multiple_choice

    def slow(self: EvalWorker, todo: Any) -> dict[int, dict[str, Any]]:
        time.sleep(3.5)  # three and a half leases
        return real(self, todo)

    monkeypatch.setattr(EvalWorker, "_multiple_choice", slow)
    stats = worker.run()
    assert (stats.completed, stats.failed, stats.lost) == (6, 0, 0)
    assert _count(queue, "eval_scores", run.run_key) == (6, 6)
    (qstats,) = queue.stats(queue_name(model))
    assert (qstats.done, qstats.dead, qstats.claims) == (6, 0, 6)


def test_a_lost_lease_costs_its_item_not_the_worker(
    queue: Queue,
    workspace: Workspace,
    put_tiny: Callable[[int], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Mid-batch, another worker whose clock runs ahead sees the leases expired and takes two
    of the items: the first worker's completions are refused per item, it goes on, and every
    item ends done once, scored once."""
    model = put_tiny(0)
    (run,) = plan(queue, model, ["arith-mc"], limit=6)
    engine = warm_engine(model, materialise(workspace, model))
    worker = EvalWorker(queue, model, engine, batch=6, lease=60.0)
    thief = Queue(queue.db, owner="thief", clock=lambda: time.time() + 3600)
    real = EvalWorker._multiple_choice
    stolen: list[int] = []

    def robbed(self: EvalWorker, todo: Any) -> dict[int, dict[str, Any]]:
        if not stolen:
            for item in thief.claim(queue_name(model), n=2, lease=60.0):
                stolen.append(item.id)
                thief.complete(item.id, item.token, "elsewhere")
        return real(self, todo)

    monkeypatch.setattr(EvalWorker, "_multiple_choice", robbed)
    stats = worker.run()
    assert len(stolen) == 2
    assert stats.lost == 6  # the ahead clock expired the whole batch's leases
    assert (stats.completed, stats.failed) == (4, 0)  # the four left, claimed again
    assert _count(queue, "eval_scores", run.run_key) == (4, 4)
    items = queue.items(queue_name(model))
    assert sorted(r.state for r in items) == ["done"] * 6
    assert {r.id for r in items if r.result == "elsewhere"} == set(stolen)


@pytest.mark.slow
def test_workers_after_a_sigkill_with_short_leases_never_crash(
    queue: Queue, workspace: Workspace, put_tiny: Callable[[int], str]
) -> None:
    """A SIGKILLed worker's items come back as retries; two workers with a one-second lease
    take them in batches and finish: each exits 0, every item is scored exactly once."""
    model = put_tiny(0)
    (run,) = plan(queue, model, ["arith-mc"], limit=40)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-m", "shipyard.evals.worker", model, "--batch", "8", "--lease", "1"]
    victim = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _wait(lambda: _count(queue, "eval_outputs", run.run_key)[0] >= 8, "first results")
        victim.send_signal(signal.SIGKILL)
    finally:
        victim.kill()
        victim.communicate()
    workers = [
        subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    for proc in workers:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
    assert _count(queue, "eval_scores", run.run_key) == (40, 40)
    (qstats,) = queue.stats(queue_name(model))
    assert (qstats.done, qstats.dead) == (40, 0)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_eval_run_workers_die_with_it(
    queue: Queue, put_tiny: Callable[[int], str], sig: signal.Signals
) -> None:
    model = put_tiny(0)
    run = subprocess.Popen(
        [
            *(sys.executable, "-m", "shipyard", "eval", "run", model, "--tasks", "arith-gen"),
            *("--workers", "2", "--lease", "30"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        workers = _wait(
            lambda: len(w := children_of(run.pid, b"shipyard.evals.worker")) == 2 and w,
            "two workers",
        )
        run.send_signal(sig)
        run.communicate(timeout=120)
        _wait(lambda: not any(alive(p) for p in workers), f"the workers to die after {sig!r}")
    finally:
        run.kill()
        run.communicate()
