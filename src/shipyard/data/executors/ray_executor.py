"""The Ray executor (`pip install shipyard[ray]`): the same tasks as Ray tasks.

Retries, timeouts and per-task outcomes are handled here exactly as in the local executor, so
one failing task is reported and the job goes on (Ray's own retry would re-raise on `get`).
"""

import os
import time
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

from shipyard.data.executors.base import Attempts, Outcome, Resume, past_deadline
from shipyard.errors import InvalidInput

T = TypeVar("T")
R = TypeVar("R")


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise InvalidInput("executor.kind = 'ray' needs Ray: pip install 'shipyard[ray]'") from None
    return ray


def _call(fn: Callable[[Any], Any], task: Any) -> tuple[bool, Any]:
    try:
        return True, fn(task)
    except Exception as exc:
        return False, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"


class RayExecutor:
    def __init__(
        self,
        workers: int = 2,
        task_timeout_s: float = 600.0,
        max_retries: int = 2,
        address: str | None = None,
    ):
        if address is None:
            # A cluster started here stays on loopback: Ray reads this switch at import time and
            # otherwise binds every daemon to the host's outward-facing address.
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        self.ray = _ray()
        self.started = False
        if not self.ray.is_initialized():
            self.ray.init(
                address=address,
                num_cpus=None if address else workers,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
            )
            self.started = True
        self.remote = self.ray.remote(max_retries=0)(_call)
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
        fn_ref = self.ray.put(fn)
        pending: dict[Any, tuple[int, float]] = {}
        # at most `workers` in flight, so a task's timeout runs from when it can start
        while book.waiting or pending:
            while book.waiting and len(pending) < self.workers:
                index = book.start()
                ref = self.remote.remote(fn_ref, tasks[index])
                pending[ref] = (index, time.monotonic() + self.task_timeout_s)
            ready, _ = self.ray.wait(list(pending), num_returns=1, timeout=0.5)
            book.watch([index for index, _ in pending.values()])
            now = time.monotonic()
            for ref in list(pending):
                index, deadline = pending[ref]
                if ref in ready:
                    result = self._result(ref)
                elif now > deadline:
                    self.ray.cancel(ref, force=True)
                    result = past_deadline(self.task_timeout_s)
                else:
                    continue
                del pending[ref]
                if isinstance(result, tuple):
                    book.succeeded(index, result[0])
                else:
                    book.failed(index, result, result == past_deadline(self.task_timeout_s))
        return book.outcomes()

    def _result(self, ref: Any) -> Any:
        try:
            ok, payload = self.ray.get(ref)
        except Exception as exc:  # the worker process died
            return f"{type(exc).__name__}: {exc}"
        return (payload,) if ok else payload

    def close(self) -> None:
        if self.started:
            self.ray.shutdown()
