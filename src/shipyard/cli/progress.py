"""Progress bars on stderr for long operations; silent when stderr is not a terminal."""

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

stderr = Console(stderr=True)


@contextmanager
def byte_progress(description: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """Yield a callback that advances a bytes bar by the count it is given."""
    columns = (BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn())
    with Progress(
        "[progress.description]{task.description}",
        *columns,
        console=stderr,
        disable=not stderr.is_terminal,
        transient=True,
    ) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)
