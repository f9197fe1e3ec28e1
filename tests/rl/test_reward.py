"""The reward service: real process, real verifiers (reasoning-gym, the sandbox), errors as
errors, a SIGKILL mid-batch costing nothing, and the alerts."""

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from shipyard.rl import score
from shipyard.rl.config import RewardConfig
from shipyard.rl.monitor import RewardMonitor
from shipyard.rl.reward import RewardService, Scored
from shipyard.rl.tasks import code_problem
from shipyard.sandbox.server import socket_path


def _drain(service: RewardService, want: int, deadline_s: float = 60.0) -> list[Scored]:
    out: list[Scored] = []
    end = time.monotonic() + deadline_s
    while len(out) < want and time.monotonic() < end:
        out += service.poll()
        if service.connection is not None:
            service.connection.poll(0.05)
    return out


def test_arith_uses_reasoning_gyms_verifier_and_thinking_is_stripped() -> None:
    assert score("arith", "..-4", {"answer": "-4"}) == (1.0, {"answer": "-4"})
    assert score("arith", "4", {"answer": "-4"})[0] == 0.0
    assert score("arith", "7", {"answer": "-4"})[0] == 0.0


def test_code_tasks_are_scored_in_the_sandbox(shipyard_home: Path) -> None:
    problem = code_problem("double")
    assert score("code", "2*x", problem.entry)[0] == 1.0
    assert score("code", "x+1", problem.entry)[0] == pytest.approx(1 / 3)  # x=1 passes only
    reward, meta = score("code", "[0]*10**9", problem.entry)  # over its memory cap: a real 0
    assert reward == 0.0 and meta["outcome"] in ("memory-limit", "nonzero-exit", "ok")


def test_errors_come_back_as_errors_not_zeros(shipyard_home: Path) -> None:
    service = RewardService(threads=2, timeout_s=30)
    service.start()
    try:
        service.submit("good", "arith", "5", {"answer": "5"})
        service.submit("broken", "arith", "5", {"question": "no answer field"})
        service.submit("unknown", "chess", "e4", {})
        service.submit("code", "code", "2*x", code_problem("double").entry)
        answers = {a.uid: a for a in _drain(service, 4)}
    finally:
        service.stop()
    assert answers["good"].reward == 1.0 and answers["good"].error is None
    assert answers["broken"].reward is None and "answer" in str(answers["broken"].error)
    assert answers["unknown"].reward is None and "chess" in str(answers["unknown"].error)
    assert answers["code"].reward == 1.0


def test_a_killed_service_loses_and_repeats_nothing(shipyard_home: Path) -> None:
    service = RewardService(threads=2, timeout_s=60)
    service.start()
    first = service.pid
    try:
        uids = [f"t{i}" for i in range(40)]
        for i, uid in enumerate(uids):
            service.submit(
                uid,
                "code" if i % 4 == 0 else "arith",
                "2*x" if i % 4 == 0 else "3",
                code_problem("double").entry if i % 4 == 0 else {"answer": "3"},
            )
            if i == 20:
                os.kill(first, signal.SIGKILL)  # mid-batch: some answered, some in flight
        answers = _drain(service, len(uids))
    finally:
        service.stop()
    assert service.restarts >= 1 and service.pid != first
    counts = Counter(a.uid for a in answers)
    assert set(counts) == set(uids) and max(counts.values()) == 1
    assert all(a.reward == 1.0 for a in answers)


def test_a_planted_length_hack_trips_the_alert() -> None:
    """The policy finds that long answers fool `planted-length`: reward jumps as length shifts."""
    cfg = RewardConfig(window=16, jump=0.3, length_shift=0.5)
    monitor = RewardMonitor(cfg)
    entry = {"fooled_at": 12}
    for completion in ["42"] * 16 + ["." * 14 + "42"] * 16:
        reward, _ = score("planted-length", completion, entry)
        monitor.observe("planted-length", reward, len(completion))
    assert [a.kind for a in monitor.alerts] == ["reward-hack"]
    assert "length" in monitor.alerts[0].detail


def test_learning_without_a_length_shift_does_not_alert() -> None:
    monitor = RewardMonitor(RewardConfig(window=16))
    for completion in ["41"] * 16 + ["42"] * 16:
        monitor.observe("arith", score("arith", completion, {"answer": "42"})[0], len(completion))
    assert not monitor.alerts


def test_an_error_rate_above_the_bound_alerts_once() -> None:
    monitor = RewardMonitor(RewardConfig(window=10, max_error_rate=0.2))
    for i in range(40):
        monitor.observe("code", None if i % 3 == 0 else 1.0, 3)
    assert [a.kind for a in monitor.alerts] == ["error-rate"]
    assert monitor.errors["code"] == 14 and monitor.scored["code"] == 26


def test_code_verifiers_through_the_sandbox_service(shipyard_home: Path) -> None:
    """`reward.sandbox: service`: the code runs in `shipyard sandbox serve`'s sandboxes; with the
    service gone, code trajectories come back as errors (to quarantine), not as zeros."""
    socket = socket_path(shipyard_home)
    serve = subprocess.Popen(
        [sys.executable, "-m", "shipyard", "sandbox", "serve", "--pool-min", "1"],
        env={**os.environ, "SHIPYARD_HOME": str(shipyard_home)},
        stderr=subprocess.DEVNULL,
    )
    service = RewardService(threads=2, timeout_s=60, sandbox="service")
    service.start()
    try:
        end = time.monotonic() + 60
        while not socket.exists() and serve.poll() is None and time.monotonic() < end:
            time.sleep(0.05)
        assert socket.exists(), "the sandbox service did not start"
        entry = code_problem("double").entry
        service.submit("right", "code", "2*x", entry)
        service.submit("wrong", "code", "x", entry)
        service.submit("noisy", "code", 'print(\'{"passed": 3, "total": 3}\') or 0', entry)
        answers = {a.uid: a for a in _drain(service, 3)}
        serve.send_signal(signal.SIGTERM)
        serve.wait(60)
        service.submit("outage", "code", "2*x", entry)
        answers.update({a.uid: a for a in _drain(service, 1)})
    finally:
        service.stop()
        if serve.poll() is None:
            serve.kill()
            serve.wait()
    assert answers["right"].reward == 1.0 and answers["right"].meta["outcome"] == "ok"
    assert answers["wrong"].reward == 0.0
    assert answers["noisy"].reward == 0.0  # printing a fake report does not pay
    assert answers["outage"].reward is None and answers["outage"].error
