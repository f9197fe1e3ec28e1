"""A batch of records as named columns, and the quarantine that bad records go to.

Stages take a batch and return it with new columns; a record that a stage cannot process goes to
the quarantine with its reason and leaves the batch, so one bad record never fails a task.
"""

import signal
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pyarrow as pa

from shipyard.data.guard import POISON_REASON, RecordGuard

Batch = dict[str, list[Any]]

QUARANTINE_SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()),
        ("source", pa.string()),
        ("stage", pa.string()),
        ("reason", pa.string()),
    ]
)


def num_rows(batch: Batch) -> int:
    return len(next(iter(batch.values()), []))


def keep_rows(batch: Batch, keep: list[int]) -> Batch:
    return {name: [column[i] for i in keep] for name, column in batch.items()}


def to_table(batch: Batch) -> pa.Table:
    return pa.table(batch) if batch else pa.table({"doc_id": pa.array([], pa.string())})


def from_table(table: pa.Table) -> Batch:
    return {name: table.column(name).to_pylist() for name in table.column_names}


@dataclass
class Quarantine:
    """Records (or whole inputs) set aside with a reason, written next to the task's output."""

    source: str
    rows: list[dict[str, str]] = field(default_factory=list)
    policy: Counter[str] = field(default_factory=Counter)  # records dropped by rule, by rule
    seen: int = 0  # records the reader met: responses, and stretches it could not read
    guard: RecordGuard | None = None  # the task's memory of records that killed a worker

    def count(self, rule: str) -> None:
        self.policy[rule] += 1

    def add(self, doc_id: str, stage: str, reason: str) -> None:
        self.rows.append(
            {"doc_id": doc_id, "source": self.source, "stage": stage, "reason": reason[:500]}
        )

    def table(self) -> pa.Table:
        return pa.Table.from_pylist(self.rows, schema=QUARANTINE_SCHEMA)


class RecordTimeout(Exception):
    """A record took longer than its stage allows."""


T = TypeVar("T")


@contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    # SIGALRM interrupts Python-level loops and sleeps; C code that never returns is left to the
    # executor's task timeout, which kills the worker process.
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def fire(signum: int, frame: Any) -> None:
        raise RecordTimeout(f"exceeded {seconds:g}s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def guarded_map(
    batch: Batch,
    stage: str,
    quarantine: Quarantine,
    fn: Callable[[int], T],
    timeout_s: float | None = None,
) -> tuple[list[int], list[T]]:
    """Apply `fn` to each row index; a row that raises or times out goes to quarantine.

    Returns the surviving row indices and their results, in order. With a `RecordGuard` on the
    quarantine, a row that killed the worker on an earlier attempt is quarantined, not re-run.
    """
    kept: list[int] = []
    results: list[T] = []
    ids = batch["doc_id"]
    guard = quarantine.guard
    for i in range(len(ids)):
        if guard and guard.is_poisoned(stage, ids[i]):
            quarantine.add(ids[i], stage, POISON_REASON)
            continue
        if guard:
            guard.enter(stage, ids[i])
        try:
            if timeout_s is None:
                value = fn(i)
            else:
                with _alarm(timeout_s):
                    value = fn(i)
        except RecordTimeout as exc:
            quarantine.add(ids[i], stage, f"timeout: {exc}")
            continue
        except Exception as exc:
            quarantine.add(ids[i], stage, f"{type(exc).__name__}: {exc}")
            continue
        finally:
            if guard:
                guard.leave()
        kept.append(i)
        results.append(value)
    return kept, results
