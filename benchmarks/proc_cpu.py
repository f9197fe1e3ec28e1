"""CPU time from Linux `/proc`, for benchmarks that weigh what a process or thread spent."""

import os
from pathlib import Path


def cpu_seconds(stat_path: str) -> tuple[float, float]:
    """User and system CPU seconds from a `/proc/<pid>/stat` or `/proc/<pid>/task/<tid>/stat`
    file (FileNotFoundError once the process is gone)."""
    fields = Path(stat_path).read_text().rsplit(")", 1)[1].split()  # the name may hold spaces
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick
