"""Progress bars and notes on stderr for long operations; bars are silent when stderr is not a
terminal. rich is imported on first use, not at start-up: the peer daemon never needs it."""

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID


@cache
def stderr() -> "Console":
    from rich.console import Console

    return Console(stderr=True)


@contextmanager
def _bar(description: str, total: int | None, eta: bool) -> Iterator[tuple["Progress", "TaskID"]]:
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    columns = [BarColumn(), DownloadColumn(), TransferSpeedColumn()]
    if eta:
        columns.append(TimeRemainingColumn())
    with Progress(
        "[progress.description]{task.description}",
        *columns,
        console=stderr(),
        disable=not stderr().is_terminal,
        transient=True,
    ) as bar:
        yield bar, bar.add_task(description, total=total)


@contextmanager
def byte_progress(description: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """Yield a callback that advances a bytes bar by the count it is given."""
    with _bar(description, total, eta=True) as (bar, task):
        yield lambda n: bar.advance(task, n)


@contextmanager
def held_progress(description: str) -> Iterator[Callable[[int, int], None]]:
    """Yield a callback taking the bytes held and wanted so far: it moves the bar, or where no
    bar can be drawn (logs, CI) prints a line per tenth of the way."""
    with _bar(description, None, eta=False) as (bar, task):
        printed = -1  # the last tenth a line was printed for

        def update(held: int, wanted: int) -> None:
            nonlocal printed
            bar.update(task, completed=held, total=wanted)
            tenth = held * 10 // max(wanted, 1)
            if not stderr().is_terminal and tenth != printed:
                printed = tenth
                print(f"progress {held}/{wanted} bytes", file=sys.stderr, flush=True)

        yield update
