"""A process named by its pid and its start time, so a saved pid is never signalled once reused.

A pid alone names whichever process holds it now: after a rank exits, the kernel may give its pid
to an unrelated process. The start time (field 22 of `/proc/<pid>/stat`, clock ticks after boot)
is read when a rank is launched and saved with its pid. Before any signal, `signal` opens a pidfd
on the pid, reads the start time again and sends through that pidfd: a mismatch means the process
is gone and nothing is sent. The pidfd pins one process across the check and the send, so there
is no window in which the pid could be reused between them.
"""

import os
import signal as signals
from dataclasses import dataclass
from typing import Any

from shipyard.errors import NotFound

MAX_PID = 1 << 22  # Linux's largest pid_max
UNKNOWN_START = -1  # a record without a start time (saved by an older version): never signalled


@dataclass(frozen=True)
class ProcessId:
    pid: int
    start: int  # starttime in /proc/<pid>/stat

    @classmethod
    def of(cls, pid: int) -> "ProcessId":
        """The process that holds `pid` now (call it on a child before reaping it)."""
        found = _stat(pid)
        if found is None:
            raise NotFound(f"no process {pid}")
        return cls(pid, found[1])

    @classmethod
    def from_record(cls, record: Any) -> "ProcessId":
        """A saved `[pid, start]`; any other record names a process we can no longer identify."""
        if isinstance(record, list) and len(record) == 2 and all(type(v) is int for v in record):
            pid, start = record
            if 0 < pid <= MAX_PID:
                return cls(pid, start)
        return cls(0, UNKNOWN_START)

    def to_record(self) -> list[int]:
        return [self.pid, self.start]

    def alive(self) -> bool:
        """Whether this very process still runs (a zombie has finished running)."""
        found = _stat(self.pid)
        return found is not None and found[1] == self.start and found[0] not in ("Z", "X")

    def signal(self, sig: int) -> bool:
        """Send `sig` if this very process is still there; False (nothing sent) if it is gone."""
        if self.start == UNKNOWN_START or self.pid <= 0:
            return False
        try:
            fd = os.pidfd_open(self.pid)
        except ProcessLookupError:
            return False
        try:
            found = _stat(self.pid)
            if found is None or found[1] != self.start:
                return False  # the pid now belongs to another process
            signals.pidfd_send_signal(fd, sig)
            return True
        except ProcessLookupError:
            return False
        finally:
            os.close(fd)


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, starttime) of `pid` from /proc, or None if no process holds it."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            text = file.read()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()  # the name, in parentheses, may hold anything
    return fields[0], int(fields[19])  # fields 3 (state) and 22 (starttime), counting from 1
