"""`shipyard batch run`'s worker processes die with it, SIGTERM or SIGKILL."""

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import Backfill


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _stat(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except (FileNotFoundError, ProcessLookupError):
        return []


def alive(pid: int) -> bool:
    stat = _stat(pid)
    return bool(stat) and stat[0] != "Z"  # an orphan's zombie may wait long for its reaper


def workers_of(parent: int) -> list[int]:
    pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    return [p for p in pids if (s := _stat(p)) and s[1] == str(parent) and _is_worker(p)]


def _is_worker(pid: int) -> bool:
    try:
        return b"shipyard.batch.worker" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_batch_run_workers_die_with_it(backfill: Backfill, sig: signal.Signals) -> None:
    run = subprocess.Popen(
        [
            *(sys.executable, "-m", "shipyard", "batch", "run", "--snapshot", "snap"),
            *("--model", "tiny", "--runtime", "sentence-transformers", "--max-tokens", "32"),
            *("--shard-minutes", "0.001", "--workers", "2"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        workers: list[int] = []

        def started() -> bool:
            workers[:] = workers_of(run.pid)
            return len(workers) >= 2 or run.poll() is not None

        wait_for(started, "two workers to start")
        assert run.poll() is None, run.communicate()[1]
        run.send_signal(sig)
        run.communicate(timeout=120)
        wait_for(lambda: not any(alive(p) for p in workers), f"the workers to die after {sig!r}")
    finally:
        run.kill()
        run.communicate()
