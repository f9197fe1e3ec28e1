"""What an executor promises: run every task, retry a failed attempt a bounded number of times,
and report each task's outcome — a task that keeps failing is reported, never raised.

With a `Resume`, an attempt that failed after deciding something a retry keeps (the pipeline's
tasks journal every record) is retried without being charged to `max_retries`: every such retry
starts further on, so a task ends whatever the number of bad records in it, and only attempts
that made no progress use up its retries."""

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

T = TypeVar("T")
R = TypeVar("R")
T_contra = TypeVar("T_contra", contravariant=True)


@dataclass(frozen=True)
class Outcome(Generic[R]):
    value: R | None
    error: str | None  # the last attempt's failure when every attempt failed
    attempts: int

    @property
    def ok(self) -> bool:
        return self.error is None


def past_deadline(timeout_s: float) -> str:
    """The error of an attempt an executor stopped at its deadline."""
    return f"timed out after {timeout_s:g}s"


class Resume(Protocol[T_contra]):
    """How an executor learns whether a failed attempt moved its task forward."""

    def progress(self, task: T_contra) -> int:
        """A count that grows with everything the task's attempts decided for good."""
        ...

    def interrupted(self, task: T_contra) -> None:
        """The executor stopped the task's attempt at its deadline (before `progress`)."""
        ...

    def watch(self, running: Sequence[T_contra]) -> None:
        """Called every time the executor wakes while tasks run (a place to show progress)."""
        ...


class Attempts(Generic[R]):
    """The retry bookkeeping every executor shares: which task starts next, and what an
    attempt's end means — a result, a retry, or (past `max_retries` attempts that made no
    progress) a reported failure."""

    def __init__(
        self,
        tasks: list[Any],
        max_retries: int,
        on_done: Callable[[int, Outcome[R]], None] | None,
        resume: "Resume[Any] | None" = None,
    ) -> None:
        self.waiting = deque(range(len(tasks)))
        self._tasks = tasks
        self._tries = [0] * len(tasks)
        self._charged = [0] * len(tasks)  # failed attempts that made no progress
        self._mark = [0] * len(tasks)  # progress when the current attempt started
        self._outcomes: dict[int, Outcome[R]] = {}
        self._max_retries = max_retries
        self._on_done = on_done
        self._resume = resume

    def start(self) -> int:
        """The next task to run; counts the attempt."""
        index = self.waiting.popleft()
        self._tries[index] += 1
        if self._resume is not None:
            self._mark[index] = self._resume.progress(self._tasks[index])
        return index

    def watch(self, running: list[int]) -> None:
        if self._resume is not None:
            self._resume.watch([self._tasks[index] for index in running])

    def succeeded(self, index: int, value: R) -> None:
        self._finish(index, Outcome(value, None, self._tries[index]))

    def failed(self, index: int, error: str, deadline: bool = False) -> None:
        """The attempt failed; `deadline`: the executor stopped it at its deadline."""
        progressed = False
        if self._resume is not None:
            task = self._tasks[index]
            if deadline:
                self._resume.interrupted(task)
            progressed = self._resume.progress(task) > self._mark[index]
        self._charged[index] += not progressed
        if self._charged[index] <= self._max_retries:
            self.waiting.append(index)
        else:
            self._finish(index, Outcome(None, error, self._tries[index]))

    def _finish(self, index: int, outcome: Outcome[R]) -> None:
        self._outcomes[index] = outcome
        if self._on_done:
            self._on_done(index, outcome)

    def outcomes(self) -> list[Outcome[R]]:
        return [self._outcomes[i] for i in range(len(self._tries))]


class Executor(Protocol):
    def map(
        self,
        fn: Callable[[T], R],
        tasks: list[T],
        on_done: Callable[[int, Outcome[R]], None] | None = None,
        resume: Resume[T] | None = None,
    ) -> list[Outcome[R]]:
        """Run `fn` on every task; outcomes in task order."""
        ...

    def close(self) -> None: ...
