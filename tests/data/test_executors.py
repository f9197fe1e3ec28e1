import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.processes import alive

from shipyard.data.executors import LocalExecutor
from shipyard.data.executors.base import Outcome


def work(task: tuple[str, Path]) -> str:
    kind, marker = task
    if kind == "flaky" and not marker.exists():  # fails on its first attempt only
        marker.touch()
        raise RuntimeError("transient")
    if kind == "crash":
        os._exit(9)
    if kind == "hang":
        time.sleep(600)
    if kind == "bad":
        raise ValueError("always bad")
    return f"done:{kind}"


KINDS = ["ok", "flaky", "crash", "bad", "ok2"]


def run(executor: object, tmp_path: Path, kinds: list[str] = KINDS) -> list[Outcome[str]]:
    tasks = [(k, tmp_path / f"{k}.marker") for k in kinds]
    seen: list[int] = []
    outcomes = executor.map(work, tasks, lambda i, o: seen.append(i))  # type: ignore[attr-defined]
    assert sorted(seen) == list(range(len(kinds)))
    return outcomes


def check(outcomes: list[Outcome[str]]) -> None:
    ok, flaky, crash, bad, ok2 = outcomes
    assert ok.value == "done:ok" and ok.attempts == 1
    assert flaky.value == "done:flaky" and flaky.attempts == 2
    assert ok2.value == "done:ok2"
    assert not crash.ok and crash.attempts == 2
    assert not bad.ok and "always bad" in (bad.error or "") and bad.attempts == 2


def check_hang(executor: object, tmp_path: Path) -> None:
    """Alone, so the short deadline can only cut the hang, never a healthy task that a loaded
    machine started late."""
    [hang] = run(executor, tmp_path, ["hang"])
    assert not hang.ok and "timed out" in (hang.error or "") and hang.attempts == 2


# The healthy tasks get a deadline no loaded machine reaches; only the hang is meant to hit one.
GENEROUS_S = 300


def test_local_executor_retries_kills_and_reports(tmp_path: Path) -> None:
    check(run(LocalExecutor(workers=2, task_timeout_s=GENEROUS_S, max_retries=1), tmp_path))
    check_hang(LocalExecutor(workers=2, task_timeout_s=1, max_retries=1), tmp_path)


@pytest.mark.slow
def test_ray_executor_same_contract(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    from shipyard.data.executors.ray_executor import RayExecutor

    executor = RayExecutor(workers=2, task_timeout_s=GENEROUS_S, max_retries=1)
    try:
        check(run(executor, tmp_path))
        executor.task_timeout_s = 2
        check_hang(executor, tmp_path)
    finally:
        executor.close()


_KILLED_PARENT = """
import os, sys, time
from pathlib import Path
from shipyard.data.executors import LocalExecutor

def hang(path: Path) -> None:
    path.write_text(str(os.getpid()))
    time.sleep(600)

LocalExecutor(workers=1, task_timeout_s=900).map(hang, [Path(sys.argv[1])])
"""


def test_a_killed_parent_takes_its_running_attempts_with_it(tmp_path: Path) -> None:
    """SIGKILL gives the parent no chance to clean up: the kernel's parent-death signal must."""
    pid_file = tmp_path / "attempt.pid"
    parent = subprocess.Popen([sys.executable, "-c", _KILLED_PARENT, str(pid_file)])
    try:
        deadline = time.monotonic() + 120
        while not pid_file.exists() or not pid_file.read_text():
            assert parent.poll() is None and time.monotonic() < deadline, "no attempt started"
            time.sleep(0.05)
        attempt = int(pid_file.read_text())
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 60
        while alive(attempt):
            assert time.monotonic() < deadline, f"attempt {attempt} outlived its SIGKILLed parent"
            time.sleep(0.05)
    finally:
        parent.kill()
        parent.wait()
