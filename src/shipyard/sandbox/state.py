"""The on-disk record of live sandboxes, so a service restarted after SIGKILL can reap orphans.

One JSON file per sandbox under `<home>/sandbox/state/`: bubblewrap's pid with its start time
(the pair names a process for ever; a pid alone may be reused by then) and the sandbox's cgroups.
The record is written before bubblewrap starts and removed after its cleanup, so there is no
moment when a sandbox exists that no record or group names.
"""

import contextlib
import json
import os
import signal
from pathlib import Path
from typing import Any

from shipyard.durable import temp_path


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: fields start after the last ')'.
    fields = raw.rsplit(")", 1)[-1].split()
    return int(fields[19])


def alive(pid: str) -> bool:
    """Whether the process `pid` (as written in a name) exists; a name that is not a pid counts
    as alive, so nothing is reaped on its account."""
    if not pid.isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def kill_if_same(pid: int, started: int | None) -> bool:
    """SIGKILL `pid` only if it is still the process that started at `started`."""
    if started is None or start_time(pid) != started:
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
        return True
    return False


class StateDir:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True, mode=0o700)

    def write(self, sandbox_id: str, record: dict[str, Any]) -> None:
        # Renamed into place but not fsynced: these guard against a dead service, and a host
        # that lost power has no sandboxes (or cgroups) left to reap.
        final = self.path / f"{sandbox_id}.json"
        temp = temp_path(final)
        temp.write_text(json.dumps(record))
        os.replace(temp, final)

    def forget(self, sandbox_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.path / f"{sandbox_id}.json").unlink()

    def reap(self) -> list[str]:
        """Kill every recorded sandbox's bubblewrap that still runs; forget all. Their ids."""
        reaped = []
        for entry in self.path.glob("*.json"):
            try:
                record = json.loads(entry.read_text())
                pid, started = int(record.get("pid", 0)), record.get("start_time")
            except (OSError, ValueError, TypeError, AttributeError):
                pid, started = 0, None  # a torn or foreign file: its groups are swept anyway
            if pid > 0:
                kill_if_same(pid, started if isinstance(started, int) else None)
            reaped.append(entry.stem)
            entry.unlink(missing_ok=True)
        return reaped
