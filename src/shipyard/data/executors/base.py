"""What an executor promises: run every task, retry a failed attempt a bounded number of times,
and report each task's outcome — a task that keeps failing is reported, never raised."""

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Outcome(Generic[R]):
    value: R | None
    error: str | None  # the last attempt's failure when every attempt failed
    attempts: int

    @property
    def ok(self) -> bool:
        return self.error is None


class Attempts(Generic[R]):
    """The retry bookkeeping every executor shares: which task starts next, and what an
    attempt's end means — a result, a retry, or (past `max_retries`) a reported failure."""

    def __init__(
        self, count: int, max_retries: int, on_done: Callable[[int, Outcome[R]], None] | None
    ) -> None:
        self.waiting = deque(range(count))
        self._tries = [0] * count
        self._outcomes: dict[int, Outcome[R]] = {}
        self._max_retries = max_retries
        self._on_done = on_done

    def start(self) -> int:
        """The next task to run; counts the attempt."""
        index = self.waiting.popleft()
        self._tries[index] += 1
        return index

    def succeeded(self, index: int, value: R) -> None:
        self._finish(index, Outcome(value, None, self._tries[index]))

    def failed(self, index: int, error: str) -> None:
        if self._tries[index] <= self._max_retries:
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
    ) -> list[Outcome[R]]:
        """Run `fn` on every task; outcomes in task order."""
        ...

    def close(self) -> None: ...
