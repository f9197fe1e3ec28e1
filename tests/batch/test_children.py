"""`shipyard batch run`'s worker processes die with it, SIGTERM or SIGKILL."""

import signal
import subprocess
import sys
import time
from collections.abc import Callable

import pytest
from tests.processes import alive, children_of

from .conftest import Backfill


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


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
            workers[:] = children_of(run.pid, b"shipyard.batch.worker")
            return len(workers) >= 2 or run.poll() is not None

        wait_for(started, "two workers to start")
        assert run.poll() is None, run.communicate()[1]
        run.send_signal(sig)
        run.communicate(timeout=120)
        wait_for(lambda: not any(alive(p) for p in workers), f"the workers to die after {sig!r}")
    finally:
        run.kill()
        run.communicate()
