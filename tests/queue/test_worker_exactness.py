"""`shipyard queue worker`: CMD dies with its worker, and a fenced CMD's effect happens once
even when a frozen worker's CMD wakes after its lease went to another worker."""

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.processes import alive

from shipyard.db import Database
from shipyard.queue import Queue

EFFECT = Path(__file__).parents[2] / "benchmarks" / "queue_effect.py"

# Starts a grandchild in its own group's background, notes both pids, and waits forever.
FAMILY = """
import pathlib, subprocess, sys, time
child = subprocess.Popen(["sleep", "600"])
pathlib.Path(sys.argv[1] + ".tmp").write_text(f"{__import__('os').getpid()} {child.pid}")
pathlib.Path(sys.argv[1] + ".tmp").rename(sys.argv[1])
time.sleep(600)
"""


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def worker(db_url: str, *args: str) -> "subprocess.Popen[str]":
    return subprocess.Popen(
        [sys.executable, "-m", "shipyard", "queue", "worker", "jobs", *args],
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"SHIPYARD_DB": db_url},
    )


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_the_command_and_what_it_started_die_with_the_worker(
    db_url: str, tmp_path: Path, sig: signal.Signals
) -> None:
    queue = Queue(Database(db_url))
    queue.create("jobs")
    queue.enqueue("jobs", "x")
    pids = tmp_path / "pids"
    proc = worker(db_url, "--grace", "0", "--", sys.executable, "-c", FAMILY, str(pids))
    try:
        wait_for(pids.exists, "the command to start its child")
        family = [int(p) for p in pids.read_text().split()]
        assert all(alive(p) for p in family)
        proc.send_signal(sig)
        proc.communicate(timeout=120)
        wait_for(lambda: not any(alive(p) for p in family), f"the command to die after {sig!r}")
    finally:
        proc.kill()
        proc.communicate()


def effects(path: Path) -> list[tuple[str, int]]:
    with sqlite3.connect(path) as db:
        return [(str(k), int(t)) for k, t in db.execute("SELECT key, token FROM effects")]


def fence(path: Path) -> dict[str, int]:
    if not path.exists():
        return {}
    with sqlite3.connect(path, timeout=60) as db:
        try:
            return {str(k): int(t) for k, t in db.execute("SELECT key, token FROM fence")}
        except sqlite3.OperationalError:  # not created yet
            return {}


@pytest.mark.parametrize("fenced", [True, False])
def test_a_frozen_workers_command_cannot_repeat_a_fenced_effect(
    db_url: str, tmp_path: Path, fenced: bool
) -> None:
    """Worker A's command starts under token 1; A is frozen past its lease; worker B claims
    the item (token 2) and its command runs too; both commands then finish. Fenced: A's is
    refused and the effect happens once, under token 2. Unfenced: twice (at least once)."""
    queue = Queue(Database(db_url))
    queue.create("jobs")
    item_id, _ = queue.enqueue("jobs", {}, key="k")
    store, go = tmp_path / "effects.db", tmp_path / "go"
    cmd = ["--", sys.executable, str(EFFECT), str(store), "--go", str(go)]
    cmd += ["--fenced"] if fenced else []
    first = worker(db_url, "--lease", "2", "--max-items", "1", *cmd)
    second = None
    try:
        wait_for(lambda: queue.get(item_id).state == "leased", "worker A to claim")
        if fenced:
            wait_for(lambda: fence(store).get("k") == 1, "A's command to note its token")
        os.kill(first.pid, signal.SIGSTOP)
        wait_for(lambda: (queue.get(item_id).lease_expires or 0) < time.time(), "A's lease to end")
        second = worker(db_url, "--lease", "600", "--max-items", "1", *cmd)
        wait_for(lambda: len(queue.get(item_id).history) == 2, "worker B to claim")
        if fenced:
            wait_for(lambda: fence(store).get("k") == 2, "B's command to note its token")
        go.touch()
        _, err = second.communicate(timeout=120)
        assert second.returncode == 0, err
        record = queue.get(item_id)
        assert record.state == "done"
        wait_for(lambda: len(effects(store)) == (1 if fenced else 2), "the commands to finish")
        os.kill(first.pid, signal.SIGCONT)
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=120)
        assert first.returncode == 0, err
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
                proc.communicate()
    assert sorted(effects(store)) == ([("k", 2)] if fenced else [("k", 1), ("k", 2)])
    assert queue.get(item_id).state == "done"
