import os
import time
from pathlib import Path

import pytest

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


def run(executor: object, tmp_path: Path) -> list[Outcome[str]]:
    kinds = ["ok", "flaky", "crash", "hang", "bad", "ok2"]
    tasks = [(k, tmp_path / f"{k}.marker") for k in kinds]
    seen: list[int] = []
    outcomes = executor.map(work, tasks, lambda i, o: seen.append(i))  # type: ignore[attr-defined]
    assert sorted(seen) == list(range(len(kinds)))
    return outcomes


def check(outcomes: list[Outcome[str]]) -> None:
    ok, flaky, crash, hang, bad, ok2 = outcomes
    assert ok.value == "done:ok" and ok.attempts == 1
    assert flaky.value == "done:flaky" and flaky.attempts == 2
    assert ok2.value == "done:ok2"
    assert not crash.ok and crash.attempts == 2
    assert not hang.ok and "timed out" in (hang.error or "")
    assert not bad.ok and "always bad" in (bad.error or "") and bad.attempts == 2


def test_local_executor_retries_kills_and_reports(tmp_path: Path) -> None:
    check(run(LocalExecutor(workers=2, task_timeout_s=3, max_retries=1), tmp_path))


@pytest.mark.slow
def test_ray_executor_same_contract(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    from shipyard.data.executors.ray_executor import RayExecutor

    executor = RayExecutor(workers=2, task_timeout_s=10, max_retries=1)
    try:
        # warm the worker pool first, so a slow worker start is not mistaken for a hang
        assert [o.value for o in executor.map(str, [1, 2])] == ["1", "2"]
        check(run(executor, tmp_path))
    finally:
        executor.close()
