"""Process checks for tests that kill a command and look for what it left behind."""

import os
from pathlib import Path


def _stat(pid: int | str) -> list[str]:
    """The fields of /proc/PID/stat after the command name: [state, ppid, ...]; [] once gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:  # gone, or gone between listing and reading
        return []


def alive(pid: int) -> bool:
    """Running, not a zombie (an orphan's zombie may wait long for its reaper)."""
    stat = _stat(pid)
    return bool(stat) and stat[0] != "Z"


def children_of(parent: int, marker: bytes) -> list[int]:
    """The live children of `parent` whose command line contains `marker`."""
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        stat = _stat(name)
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:
            continue
        if stat and stat[1] == str(parent) and marker in cmdline:
            found.append(int(name))
    return found
