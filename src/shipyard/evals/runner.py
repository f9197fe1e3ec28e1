"""Fan a model's eval items out through the work queue and work them with one warm engine.

The engine is the serving engine in process (`LocalEngine`): log-likelihoods and generation run
through the same code as a replica's API, and the choices of a multiple-choice item share their
context's KV through its prefix cache.

Each (run, item) is one queue item keyed by the run key and the item id, so enqueueing again adds
nothing and a finished item is never run again. A worker claims a batch, scores every
multiple-choice item of the batch in batched forward passes, generates the rest, and completes
each item with its output and score written in the same transaction (exactly once). The claimed
leases are renewed from a heartbeat thread for as long as the batch takes. When a batched pass
fails, each of its items is scored alone, so one bad item fails by itself with its reason. A lease
lost meanwhile (the worker was frozen past it and another took the item) costs that item only:
its result is dropped, the worker goes on. A killed worker's leases expire and its unfinished
items are claimed by the next worker.
"""

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shipyard.errors import InvalidInput, ShipyardError
from shipyard.evals.scoring import score
from shipyard.evals.store import ResultStore, RunKey, judge_version
from shipyard.evals.tasks import Item, Task, get_task
from shipyard.hashing import sha256_hex
from shipyard.home import shipyard_home
from shipyard.queue import Item as QueueItem
from shipyard.queue import Queue, StaleLease
from shipyard.queue.heartbeat import Heartbeat
from shipyard.serve import models as serve_models
from shipyard.workspace import Workspace

if TYPE_CHECKING:  # torch loads only where a model runs, not for `eval report`
    from shipyard.serve.engine import LocalEngine


def queue_name(model_id: str) -> str:
    return f"eval.{model_id[:40]}"


@dataclass(frozen=True)
class Planned:
    task: str
    run_key: str
    items: int
    enqueued: int  # new queue items (0 when every item was queued or done before)


def plan(
    queue: Queue, model_id: str, task_refs: Sequence[str], limit: int | None = None
) -> list[Planned]:
    """Register a run per task for `model_id` and enqueue its items (idempotently)."""
    store = ResultStore(queue.db)
    queue.create(queue_name(model_id), max_attempts=3)
    planned = []
    for given in task_refs:
        # a JSONL task by its absolute path: workers elsewhere must find the same file
        ref = f"jsonl:{Path(given[6:]).resolve()}" if given.startswith("jsonl:") else given
        task = get_task(ref)
        items = list(task.load())[:limit]
        run_key = store.add_run(RunKey.of(model_id, task), ref, len(items))
        done = store.done_items(run_key)
        todo = [i for i in items if i.id not in done]
        payloads = [{"run": run_key, "task": ref, "item": i.id} for i in todo]
        keys = [f"{run_key[:16]}:{sha256_hex(i.id.encode())[:16]}" for i in todo]
        new = queue.enqueue_many(queue_name(model_id), payloads, keys=keys) if todo else []
        planned.append(Planned(task.name, run_key, len(items), sum(1 for _, n in new if n)))
    return planned


def materialise(workspace: Workspace, model_id: str) -> Path:
    """The model's Hugging Face directory in $SHIPYARD_HOME/evals/models, fetched and verified
    once (the serving layer's cache: built beside its final name, then renamed)."""
    cache = shipyard_home() / "evals" / "models"
    return serve_models.materialise(workspace, model_id, cache).path


_ENGINES: dict[str, "LocalEngine"] = {}
_LOCK = threading.Lock()


def warm_engine(model_id: str, model_dir: Path) -> "LocalEngine":
    """This process's engine for `model_id`, loaded once and shared by every task
    (torch threads: $SHIPYARD_EVAL_THREADS, default 1)."""
    from shipyard.serve.engine import LocalEngine, load_causal_lm

    with _LOCK:
        engine = _ENGINES.get(model_id)
        if engine is None:
            threads = int(os.environ.get("SHIPYARD_EVAL_THREADS", "1"))
            engine = _ENGINES[model_id] = LocalEngine(load_causal_lm(model_dir, threads))
        return engine


@dataclass
class WorkerStats:
    completed: int = 0
    failed: int = 0
    skipped: int = 0  # already done (its output was stored before)
    lost: int = 0  # its lease was lost (another worker has it now): its result was dropped


class EvalWorker:
    """Works one model's queue with one warm engine shared by every task."""

    def __init__(
        self,
        queue: Queue,
        model_id: str,
        engine: "LocalEngine",
        batch: int = 16,
        lease: float = 120.0,
        note: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.queue, self.model_id, self.engine = queue, model_id, engine
        self.store = ResultStore(queue.db)
        self.batch, self.lease, self.note = batch, lease, note
        self.stats = WorkerStats()
        self._tasks: dict[str, tuple[Task, dict[str, Item]]] = {}

    def run(self, until_empty: bool = True, max_items: int | None = None) -> WorkerStats:
        name = queue_name(self.model_id)
        while max_items is None or self.stats.completed < max_items:
            claimed = self.queue.claim(name, n=self.batch, lease=self.lease)
            if not claimed:
                if until_empty and not self._pending(name):
                    break
                self.queue.wait(name, 0.5)
                continue
            with Heartbeat(self.queue, claimed, self.lease) as beat:
                self._work(claimed, beat)
            done = self.stats
            self.note(
                f"{done.completed} items done, {done.failed} failed, {done.skipped} skipped"
                + (f", {done.lost} leases lost" if done.lost else "")
            )
        return self.stats

    def _pending(self, name: str) -> bool:
        (stats,) = self.queue.stats(name)
        return bool(stats.leased or stats.waiting)

    def _task(self, ref: str) -> tuple[Task, dict[str, Item]]:
        if ref not in self._tasks:
            task = get_task(ref)
            self._tasks[ref] = (task, {i.id: i for i in task.load()})
        return self._tasks[ref]

    def _work(self, group: list[QueueItem], beat: Heartbeat) -> None:
        todo = []
        for q in group:
            try:
                task, item = self._resolve(q)
            except ShipyardError as exc:
                self._fail(q, beat, str(exc))
                continue
            if not self._stored(q, beat, item):
                todo.append((q, task, item))
        mc = [(q, t, i) for q, t, i in todo if t.kind == "mc"]
        outputs = self._multiple_choice_isolated(mc, beat)
        for q, task, item in todo:
            if q.id in beat.lost or (task.kind == "mc" and q.id not in outputs):
                continue  # lost meanwhile, or failed alone with its reason
            try:
                output = outputs.get(q.id) or self._generate(task, item)
                result = score(task, item, output)
            except Exception as exc:
                self._fail(q, beat, f"{type(exc).__name__}: {exc}")
                continue
            self._complete(q, beat, task, item, output, result)

    def _multiple_choice_isolated(
        self, mc: list[tuple[QueueItem, Task, Item]], beat: Heartbeat
    ) -> dict[int, dict[str, Any]]:
        """Score `mc` in batched passes; if a pass fails, each item alone, so only the item
        that breaks the engine fails (with the engine's reason)."""
        try:
            return self._multiple_choice(mc)
        except Exception as exc:
            if len(mc) == 1:
                self._fail(mc[0][0], beat, f"engine: {type(exc).__name__}: {exc}")
                return {}
        outputs: dict[int, dict[str, Any]] = {}
        for one in mc:
            if one[0].id not in beat.lost:
                outputs |= self._multiple_choice_isolated([one], beat)
        return outputs

    def _stored(self, q: QueueItem, beat: Heartbeat, item: Item) -> bool:
        """Complete without running an item whose output is already stored for its run."""
        if not self.store.has_output(str(q.payload["run"]), item.id):
            return False
        if self._end(
            q, beat, lambda: self.queue.complete(q.id, q.token, {"outcome": "already-stored"})
        ):
            self.stats.skipped += 1
        return True

    def _fail(self, q: QueueItem, beat: Heartbeat, reason: str) -> None:
        if self._end(q, beat, lambda: self.queue.fail(q.id, q.token, reason)):
            self.stats.failed += 1

    def _end(self, q: QueueItem, beat: Heartbeat, call: Callable[[], object]) -> bool:
        """End the item's lease with `call`; False (and noted) when the lease was lost."""
        beat.drop(q.id)
        why = beat.lost.get(q.id)
        if why is None:
            try:
                call()
                return True
            except StaleLease as exc:
                why = str(exc)
        self.stats.lost += 1
        self.note(f"item {q.id}: {why}; its result is dropped")
        return False

    def _resolve(self, q: QueueItem) -> tuple[Task, Item]:
        payload = q.payload
        if not isinstance(payload, dict) or not {"run", "task", "item"} <= set(payload):
            raise InvalidInput(f"queue item {q.id}: not an eval payload")
        task, items = self._task(str(payload["task"]))
        if RunKey.of(self.model_id, task).hash != payload["run"]:
            # The task's items, template, shots or sampling changed since it was planned: its
            # outputs now would not be those of the planned run, so none is stored under it.
            raise InvalidInput(
                f"task {task.name} changed since run {payload['run']} was planned "
                "(version, template, few-shot set or sampling): plan it again"
            )
        item = items.get(str(payload["item"]))
        if item is None:
            raise InvalidInput(f"task {task.name} has no item {payload['item']!r}")
        return task, item

    def _multiple_choice(
        self, todo: list[tuple[QueueItem, Task, Item]]
    ) -> dict[int, dict[str, Any]]:
        pairs: list[tuple[str, str]] = []
        for _, task, item in todo:
            context = task.render(item)
            pairs += [(context, " " + choice) for choice in item.choices]
        scores = self.engine.loglikelihoods(pairs)
        outputs, at = {}, 0
        for q, _, item in todo:
            mine = scores[at : at + len(item.choices)]
            at += len(item.choices)
            outputs[q.id] = {
                "logprobs": [s.logprob for s in mine],
                "greedy": [s.greedy for s in mine],
            }
        return outputs

    def _generate(self, task: Task, item: Item) -> dict[str, Any]:
        """Greedy, one item at a time: its output never depends on a batch-mate."""
        limit = task.sampling.max_tokens
        ids = self.engine.prompt_ids(task.render(item), task.sampling.chat)
        ids = ids[-(self.engine.context - limit) :]  # keep the prompt's end, as the harness
        (out,) = self.engine.generate([ids], max_tokens=limit, stop=task.sampling.stop)
        return {"text": out.text}

    def _complete(
        self,
        q: QueueItem,
        beat: Heartbeat,
        task: Task,
        item: Item,
        output: dict[str, Any],
        result: Any,
    ) -> None:
        run_key, judge = str(q.payload["run"]), judge_version(task)

        def effect(db: Any) -> None:
            ResultStore.record(db, run_key, judge, item.id, item.cluster, output, result)

        outcome = {"outcome": result.outcome}
        if self._end(q, beat, lambda: self.queue.complete(q.id, q.token, outcome, effect=effect)):
            self.stats.completed += 1


def work(
    queue: Queue,
    workspace: Workspace,
    model_id: str,
    batch: int = 16,
    lease: float = 120.0,
    max_items: int | None = None,
    note: Callable[[str], None] = lambda _: None,
) -> WorkerStats:
    """Materialise the model, warm its engine and work its queue until nothing is left."""
    engine = warm_engine(model_id, materialise(workspace, model_id))
    worker = EvalWorker(queue, model_id, engine, batch=batch, lease=lease, note=note)
    return worker.run(max_items=max_items)
