"""The default executor: each task attempt in its own forked process, a few at a time.

A process per attempt is what makes a hung task killable: past `task_timeout_s` the process is
killed and the attempt counts as failed. A crash (segfault, out of memory) is a failed attempt,
not a failed run.
"""

import multiprocessing
import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, TypeVar

from shipyard.children import die_with_parent
from shipyard.data.executors.base import Attempts, Outcome, Resume, past_deadline

T = TypeVar("T")
R = TypeVar("R")

_CTX = multiprocessing.get_context("fork")


def _child(fn: Callable[[Any], Any], task: Any, conn: Connection, parent: int) -> None:
    die_with_parent(parent)  # a SIGKILLed `data run` must not leave its attempts running
    try:
        conn.send((True, fn(task)))
    except BaseException as exc:
        conn.send((False, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"))
    finally:
        conn.close()


@dataclass
class _Attempt:
    index: int
    process: Any
    conn: Connection
    deadline: float


class LocalExecutor:
    def __init__(self, workers: int = 2, task_timeout_s: float = 600.0, max_retries: int = 2):
        self.workers = workers
        self.task_timeout_s = task_timeout_s
        self.max_retries = max_retries

    def map(
        self,
        fn: Callable[[T], R],
        tasks: list[T],
        on_done: Callable[[int, Outcome[R]], None] | None = None,
        resume: Resume[T] | None = None,
    ) -> list[Outcome[R]]:
        book: Attempts[R] = Attempts(tasks, self.max_retries, on_done, resume)
        running: list[_Attempt] = []
        while book.waiting or running:
            while book.waiting and len(running) < self.workers:
                index = book.start()
                running.append(self._start(fn, tasks[index], index))
            ready = wait([a.conn for a in running] + [a.process.sentinel for a in running], 0.2)
            book.watch([a.index for a in running])
            now = time.monotonic()
            for attempt in list(running):
                result = self._finished(attempt, ready, now)
                if result is False:
                    continue
                running.remove(attempt)
                if isinstance(result, tuple):
                    book.succeeded(attempt.index, result[0])
                else:
                    deadline = result == past_deadline(self.task_timeout_s)
                    book.failed(attempt.index, result, deadline)
        return book.outcomes()

    def _start(self, fn: Callable[[T], R], task: T, index: int) -> _Attempt:
        parent, child = _CTX.Pipe(duplex=False)
        args = (fn, task, child, os.getpid())
        process = _CTX.Process(target=_child, args=args, daemon=True)
        process.start()
        child.close()
        return _Attempt(index, process, parent, time.monotonic() + self.task_timeout_s)

    def _finished(self, attempt: _Attempt, ready: list[Any], now: float) -> Any:
        """False while running; (value,) on success; an error string on failure."""
        if attempt.conn in ready:
            try:
                ok, payload = attempt.conn.recv()
            except EOFError:
                ok, payload = False, None
            attempt.process.join()
            attempt.conn.close()
            if ok:
                return (payload,)
            return payload or f"worker died (exit code {attempt.process.exitcode})"
        if attempt.process.sentinel in ready and not attempt.conn.poll():
            attempt.process.join()
            attempt.conn.close()
            return f"worker died (exit code {attempt.process.exitcode})"
        if now > attempt.deadline:
            attempt.process.kill()
            attempt.process.join()
            attempt.conn.close()
            return past_deadline(self.task_timeout_s)
        return False

    def close(self) -> None:
        """Nothing to release: each attempt's process is reaped when the attempt ends."""
