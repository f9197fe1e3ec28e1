"""Small runs of the queue benchmarks: their figures are right, whatever the speed."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from tests.processes import alive, children_of

from shipyard.db.cluster import Cluster

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"
T = TypeVar("T")


def run(script: str, *args: str) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    figures: dict[str, object] = json.loads(result.stdout.splitlines()[-1])
    return figures


@pytest.mark.slow
def test_throughput_drains_every_item_on_each_system(pg_cluster: Cluster) -> None:
    figures = run("queue_throughput.py", "--items", "200", "--workers", "2")
    assert isinstance(figures["value"], float) and figures["value"] > 0
    assert isinstance(figures["sqlite"], float) and figures["sqlite"] > 0
    for baseline in ("pgqueuer", "procrastinate"):  # null where not installed
        assert figures[baseline] is None or float(str(figures[baseline])) > 0


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_chaos_loses_nothing_and_doubles_nothing(pg_cluster: Cluster, backend: str) -> None:
    figures = run(
        "queue_chaos.py",
        "--items",
        "400",
        "--workers",
        "3",
        "--kill-every",
        "0.3",
        "--restart-at",
        "0.05",
        "--backend",
        backend,
        "--commands",
        "40",
    )
    assert figures["lost"] == figures["double_effects"] == figures["stale_completions"] == 0
    # the fenced command's external effect happened exactly once per key, chaos or not
    assert figures["fenced_duplicate_effects"] == figures["fenced_missing_effects"] == 0
    assert figures["fenced_lost"] == figures["fenced_dead"] == 0
    assert isinstance(figures["fenced_kills"], int) and figures["fenced_kills"] > 0
    # the unfenced one's are counted, not judged: at least once
    assert isinstance(figures["unfenced_duplicate_effects"], int)
    assert figures["unfenced_missing_effects"] == figures["unfenced_lost"] == 0
    assert figures["wrongly_dead"] == figures["done_without_effect"] == 0
    assert figures["dead"] == figures["built_to_fail"] == 4
    assert isinstance(figures["kills"], int) and figures["kills"] > 0
    assert figures["db_restarts"] == (1 if backend == "postgresql" else 0)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_benchmark_leaves_no_postgresql_behind(
    pg_cluster: Cluster, sig: signal.Signals
) -> None:
    """queue_throughput.py killed mid-run (a timeout's SIGTERM or SIGKILL): its throwaway
    server stops and its files go."""
    scratch = Path(tempfile.mkdtemp(prefix="h7-bench-"))
    scratch.chmod(0o755)  # the server runs as `postgres` under it
    try:
        proc = subprocess.Popen(
            [sys.executable, str(BENCHMARKS / "queue_throughput.py"), "--items", "1000000"],
            env=os.environ | {"TMPDIR": str(scratch)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            pidfile = _wait(lambda: next(scratch.glob("shipyard-pg-*/data/postmaster.pid"), None))
            root = pidfile.parents[1]
            server = int(_wait(lambda: pidfile.read_text().split()[:1])[0])
            _wait(
                lambda: children_of(proc.pid, b"keeper.py")
            )  # the server started and is in the keeper's care
            proc.send_signal(sig)
            proc.wait(timeout=120)
            _wait(lambda: not alive(server) and not root.exists())
        finally:
            proc.kill()
            proc.wait()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _wait(condition: Callable[[], T | None], timeout: float = 180) -> T:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    return value
