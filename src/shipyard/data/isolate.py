"""Run a per-record function in a worker process that can be killed when a record takes too long.

A signal handler runs only between Python bytecodes, so an alarm cannot stop an extractor stuck
in native code (a deeply nested page keeps resiliparse busy for minutes). `Isolated` forks a
worker that inherits the function and its data; the parent sends a row index, waits up to the
timeout for the answer, and on a timeout kills the worker (SIGKILL reaches native code too) and
forks a fresh one for the next record. A worker that crashes costs its record the same way.

A record is charged the CPU time of its worker plus the time the worker spent asleep or blocked
(`/proc/<pid>/stat`), never the time it waited for a CPU: on a loaded machine a healthy record
takes longer by the clock but not by this measure, so load does not turn a healthy record into a
timeout, and a hang is still cut after its budget whether it spins or sleeps.
"""

import contextlib
import os
import signal
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, Pipe
from typing import Any, Generic, TypeVar

from shipyard.children import die_with_parent

T = TypeVar("T")

_LOOK_S = 0.1  # how often a waiting parent samples its worker
TIMEOUT = "timeout after "  # how a timed-out record's quarantine reason starts


class _Charge:
    """Seconds a worker is charged for its record: its CPU time, plus the time it spent asleep
    or blocked (sampled at each look: a hang that sleeps is a hang too), never the time it
    waited for a CPU. Without /proc, the clock's seconds."""

    _TICK = os.sysconf("SC_CLK_TCK")

    def __init__(self, pid: int) -> None:
        self._path = f"/proc/{pid}/stat"
        self._last = time.monotonic()
        _, self._cpu0 = self._sample()
        self._blocked = 0.0

    def _sample(self) -> tuple[str, float]:
        """(state letter, CPU seconds) of the worker."""
        try:
            with open(self._path) as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            return fields[0], (int(fields[11]) + int(fields[12])) / self._TICK
        except (OSError, IndexError, ValueError):
            return "S", 0.0  # gone, or no /proc: count the clock

    def seconds(self) -> float:
        now = time.monotonic()
        state, cpu = self._sample()
        if state in "SDT":  # not running nor waiting to run since the last look, near enough
            self._blocked += now - self._last
        self._last = now
        return cpu - self._cpu0 + self._blocked


class RecordTimeout(Exception):
    """A record took longer than its stage allows."""


class RecordCrash(Exception):
    """The worker died while processing a record."""


class RecordError(Exception):
    """The function raised for a record (the worker's exception, as type and message)."""


def _serve(fn: Callable[[int], Any], conn: Connection) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when the worker ends
    while True:
        try:
            index = conn.recv()
        except EOFError:
            return
        try:
            conn.send((True, fn(index)))
        except Exception as exc:
            conn.send((False, f"{type(exc).__name__}: {exc}"))


class Isolated(Generic[T]):
    """`call(i)` runs `fn(i)` in the worker; use as a context manager so the worker ends."""

    def __init__(self, fn: Callable[[int], T], stage: str, timeout_s: float) -> None:
        self._fn = fn
        self._stage = stage
        self._timeout_s = timeout_s
        self._pid: int | None = None
        self._conn: Connection | None = None

    def __enter__(self) -> "Isolated[T]":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, index: int) -> T:
        conn = self._worker()
        assert self._pid is not None
        conn.send(index)
        charge = _Charge(self._pid)
        used = 0.0
        # the charge never runs ahead of the clock, so waiting out what is left cannot overshoot;
        # short looks keep the sampling of sleep fine
        while not conn.poll(min(max(self._timeout_s - used, 0.01), _LOOK_S)):
            used = charge.seconds()
            if used >= self._timeout_s:
                self._kill()
                raise RecordTimeout(f"{TIMEOUT}{self._timeout_s:g}s in {self._stage}")
        try:
            ok, payload = conn.recv()
        except EOFError:
            code = self._kill()
            raise RecordCrash(f"{self._stage} worker died ({_describe(code)})") from None
        if not ok:
            raise RecordError(payload)
        result: T = payload
        return result

    def _worker(self) -> Connection:
        if self._conn is None:
            # a plain fork: the executor's task processes are daemons, which multiprocessing
            # does not let have children
            parent, child = Pipe()
            me = os.getpid()
            pid = os.fork()
            if pid == 0:
                try:
                    # the worker holds copies of its parent's descriptors (the executor's
                    # pipes among them): an orphan would keep them open
                    die_with_parent(me)
                    parent.close()
                    _serve(self._fn, child)
                finally:
                    os._exit(0)
            child.close()
            self._pid, self._conn = pid, parent
        return self._conn

    def _kill(self) -> int | None:
        """End the worker now; its exit status (negative: the signal that ended it)."""
        if self._conn is not None:
            self._conn.close()
        pid, self._pid, self._conn = self._pid, None, None
        if pid is None:
            return None
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status)

    def close(self) -> None:
        self._kill()


def _describe(code: int | None) -> str:
    if code is not None and code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"exit code {code}"
