"""Spares forked from one warm process, so that a spare is warm milliseconds after it is asked for.

A spare started as a new interpreter spends seconds of CPU importing torch and dynamo; when
failures come faster than that (or the host is busy), restarts find no warm spare. Here one fork
server (multiprocessing's) imports `zygote` once; each spare is a fork of it, waiting on a pipe
for its assignment. Its exit code comes back through the server, as a child's would.
"""

import multiprocessing
import multiprocessing.process
import os
import sys
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext
from pathlib import Path

_context: ForkServerContext | None = None


def available() -> bool:
    return "forkserver" in multiprocessing.get_all_start_methods()


def _server() -> ForkServerContext:
    global _context
    if _context is None:
        context = multiprocessing.get_context("forkserver")
        assert isinstance(context, ForkServerContext)
        context.set_forkserver_preload(["shipyard.train.zygote"])
        _context = context
    return _context


class ForkedSpare:
    """A rank process forked from the warm server; `assign` sends its assignment (JSON)."""

    def __init__(self, log: Path, warm_dir: Path) -> None:
        context = _server()
        mine, theirs = context.Pipe(duplex=False)
        self.process = context.Process(
            target=serve, args=(mine, str(log), str(warm_dir)), name="shipyard-rank"
        )
        self.process.start()
        mine.close()
        self._assignment = theirs
        # A rank outlives its controller (a new one attaches): multiprocessing must not join
        # or terminate it when the controller exits.
        multiprocessing.process._children.discard(self.process)  # type: ignore[attr-defined]
        assert self.process.pid is not None
        self.pid: int = self.process.pid

    def assign(self, line: str) -> None:
        self._assignment.send(line)
        self._assignment.close()

    def poll(self) -> int | None:
        return self.process.exitcode

    def wait(self) -> int | None:
        self.process.join()
        return self.process.exitcode

    def kill(self) -> None:
        self.process.kill()


def serve(assignment: Connection, log: str, warm_dir: str) -> None:
    """In the forked spare: its own session and log, a warm marker, then its assignment."""
    os.setsid()  # a Ctrl-C to the controller is the controller's to handle
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    Path(warm_dir, f"warm-{os.getpid()}").touch()
    try:
        line = assignment.recv()
    except EOFError:  # the controller went away before using this spare
        sys.exit(0)
    from shipyard.train.worker import Assignment, run

    sys.exit(run(Assignment.from_json(line)))
