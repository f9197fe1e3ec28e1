"""Verifiers: `score(env, completion, entry) -> (reward, metadata)`, one per environment.

A verifier that raises has not scored: the reward service reports an error and the trajectory is
quarantined, never given 0. `arith` is reasoning-gym's own `score_answer`; `code` runs the
completion against tests in a fresh sandbox (`shipyard.sandbox`); `planted-length` is a verifier
that a long answer fools, kept to test the reward-hack alert.
"""

import atexit
import contextlib
import json
import os
import threading
from collections.abc import Callable
from typing import Any

from shipyard.errors import InvalidInput
from shipyard.rl.tasks import extract_answer

Verifier = Callable[[str, dict[str, Any]], tuple[float, dict[str, Any]]]


def _arith(completion: str, entry: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    from reasoning_gym.arithmetic.basic_arithmetic import BasicArithmeticDataset

    if not isinstance(entry.get("answer"), str):
        raise InvalidInput("arith entry has no string 'answer'")
    answer = extract_answer(completion)
    # score_answer reads only `entry["answer"]`; it does not need a dataset instance.
    reward = BasicArithmeticDataset.score_answer(None, answer, entry)
    return float(reward), {"answer": answer}


_CODE_RUNNER = """
import json, sys
expr = open("solution.txt").read()
tests = json.loads(open("tests.json").read())
passed = 0
for x, want in tests:
    try:
        passed += eval(expr, {"__builtins__": {}}, {"x": x}) == want
    except Exception:
        pass
print(json.dumps({"passed": passed, "total": len(tests)}))
"""


_hosts: dict[int, Any] = {}
_hosts_lock = threading.Lock()


def _sandbox(limits: Any) -> Any:
    """A ready sandbox from this process's own host: a forked reward service must not reuse
    the host (and its threads' locks) of the process it was forked from."""
    from shipyard.home import shipyard_home
    from shipyard.sandbox import Host

    with _hosts_lock:
        host = _hosts.get(os.getpid())
        if host is None:
            host = _hosts[os.getpid()] = Host(shipyard_home(), tag=f"-rl{os.getpid()}")
            atexit.register(host.close)
    box = host.start(host.images.resolve("host"), limits)
    try:
        box.wait_ready()
    finally:
        if box.dead:
            host.finish(box, box.dead)
    return box


def _code(
    completion: str, entry: dict[str, Any], sandbox: str = "local"
) -> tuple[float, dict[str, Any]]:
    from shipyard.sandbox import Client, Limits, Outcome

    tests = entry.get("tests")
    if not isinstance(tests, list) or not tests:
        raise InvalidInput("code entry has no 'tests' list")
    limits = Limits(memory_mib=128, pids=16, cpus=1.0)
    with contextlib.ExitStack() as stack:
        if sandbox == "service":  # `shipyard sandbox serve` on this home: warm pools, leases
            client = stack.enter_context(Client())
            box = stack.enter_context(client.create(limits=limits, ttl_s=60))
        else:
            box = stack.enter_context(_sandbox(limits))
        box.put_files(
            {
                "run.py": _CODE_RUNNER.encode(),
                "solution.txt": completion.encode(),
                "tests.json": json.dumps(tests).encode(),
            }
        )
        result = box.exec(["python3", "run.py"], timeout=5.0)
    if result.outcome is not Outcome.OK:
        # The candidate's fault (it ran too long, used too much): a real score of 0.
        return 0.0, {"outcome": result.outcome.value}
    # The last line is the runner's; the candidate's code ran in the same process and may have
    # written anything: a report that does not parse is its doing, a 0, not a reward error.
    try:
        report = json.loads(result.stdout.strip().splitlines()[-1])
        passed, total = int(report["passed"]), int(report["total"])
    except (ValueError, KeyError, IndexError, TypeError):
        return 0.0, {"outcome": "bad-report"}
    if total != len(tests) or not 0 <= passed <= total:
        return 0.0, {"outcome": "bad-report"}
    return passed / total, {"outcome": "ok", "passed": passed, "total": total}


def _planted_length(completion: str, entry: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    return (1.0 if len(completion) >= int(entry.get("fooled_at", 12)) else 0.0), {}


VERIFIERS: dict[str, Verifier] = {"arith": _arith, "code": _code, "planted-length": _planted_length}


def score(
    env: str, completion: str, entry: dict[str, Any], sandbox: str = "local"
) -> tuple[float, dict[str, Any]]:
    """The uniform scoring API; raises when the environment cannot score this trajectory.
    `sandbox`: where code runs, "local" (a host in this process) or "service"."""
    if env == "code":
        return _code(completion, entry, sandbox)
    verifier = VERIFIERS.get(env)
    if verifier is None:
        raise InvalidInput(f"environment {env!r} has no verifier; known: {sorted(VERIFIERS)}")
    return verifier(completion, entry)
