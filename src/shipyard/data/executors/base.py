"""What an executor promises: run every task, retry a failed attempt a bounded number of times,
and report each task's outcome — a task that keeps failing is reported, never raised."""

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


OnDone = Callable[[int, "Outcome[R]"], None]


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
