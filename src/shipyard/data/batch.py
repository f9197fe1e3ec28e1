"""A batch of records as named columns, and the quarantine that bad records go to.

Stages take a batch and return it with new columns; a record that a stage cannot process goes to
the quarantine with its reason and leaves the batch, so one bad record never fails a task.
"""

import contextlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pyarrow as pa

from shipyard.data.guard import POISON_REASON, RecordGuard
from shipyard.data.isolate import Isolated, RecordCrash, RecordError, RecordTimeout
from shipyard.data.journal import Journal, Verdict

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
    journal: Journal | None = None  # this stage's decided records, kept across attempts

    def count(self, rule: str) -> None:
        self.policy[rule] += 1

    def add(self, doc_id: str, stage: str, reason: str) -> None:
        self.rows.append(
            {"doc_id": doc_id, "source": self.source, "stage": stage, "reason": reason[:500]}
        )

    def table(self) -> pa.Table:
        return pa.Table.from_pylist(self.rows, schema=QUARANTINE_SCHEMA)


T = TypeVar("T")


def guarded_map(
    batch: Batch,
    stage: str,
    quarantine: Quarantine,
    fn: Callable[[int], T],
    timeout_s: float | None = None,
) -> tuple[list[int], list[T]]:
    """Apply `fn` to each row index; a row that raises, crashes or times out goes to quarantine.

    With `timeout_s`, rows run in a worker process (`Isolated`) that is killed and replaced when a
    row takes longer, however deep in native code it is stuck; a row past the timeout is
    quarantined as "timeout after Ns in <stage>", and any number of rows may be. Returns the
    surviving row indices and their results, in order. With a `RecordGuard` on the quarantine, a
    row that killed the whole task on an earlier attempt is quarantined, not re-run; with a
    `Journal`, every row's outcome is written as it is decided, and a row an earlier attempt
    decided is not run again.
    """
    kept: list[int] = []
    results: list[T] = []
    ids = batch["doc_id"]
    guard, journal = quarantine.guard, quarantine.journal

    def decide(i: int, verdict: Verdict, value: Any) -> None:
        if verdict == "ok":
            kept.append(i)
            results.append(value)
        else:
            quarantine.add(ids[i], stage, value)
        if journal is not None and journal.get(ids[i]) is None:
            journal.add(ids[i], verdict, value)
            if guard:
                guard.advance()

    with contextlib.ExitStack() as stack:
        call = fn
        if timeout_s is not None:
            call = stack.enter_context(Isolated(fn, stage, timeout_s)).call
        for i in range(len(ids)):
            entry = journal.get(ids[i]) if journal else None
            if entry is not None:  # decided by an earlier attempt
                decide(i, entry.verdict, entry.value)
                continue
            if guard and guard.is_poisoned(stage, ids[i]):
                decide(i, "quarantined", POISON_REASON)
                continue
            if guard:
                guard.enter(stage, ids[i])
            try:
                value = call(i)
            except RecordTimeout as exc:
                decide(i, "timeout", str(exc))
                continue
            except (RecordCrash, RecordError) as exc:
                decide(i, "quarantined", str(exc))
                continue
            except Exception as exc:
                decide(i, "quarantined", f"{type(exc).__name__}: {exc}")
                continue
            finally:
                if guard:
                    guard.leave()
            decide(i, "ok", value)
    return kept, results
