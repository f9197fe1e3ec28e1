"""Run the property-based tests (pytest marker `fuzz`) long and count what escapes them.

    .venv/bin/python benchmarks/fuzz.py [--seconds 600] [--tests tests]

Runs every `fuzz`-marked test in rounds, each a pytest process under the `fuzz` hypothesis
profile with a fresh `--hypothesis-seed`, until about `--seconds` have passed. The first round
runs a few examples of each test to time it; later rounds size each test's examples so that the
round fills its share of the time left, each round up to twice as long as the last. Per test it
reports the runs (calls of the test body, shrinking included) and the uncaught exceptions:
distinct (exception type, first line of message) pairs from failed runs, a hang counted as one.
Ends with `fuzz: N uncaught exceptions in S s over T targets (goal: 0)` and exits 1 when N > 0.

The same file is the pytest plugin each round loads (`-p fuzz`): it sets each test's examples
from the round's plan and writes one JSON line per test as it starts and ends. pytest's cache
stays on: a target's fixture may keep what is slow to make there (the replica's tokenizer).
"""

import argparse
import functools
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
CALIBRATION_EXAMPLES = 20  # examples per test in the first round, which times each test
MAX_EXAMPLES = 1_000_000
MIN_ROUND_S = 10.0


# ---------------------------------------------------------------------------------------------
# The plugin, inside each round's pytest process


class _Plugin:
    """Sets each hypothesis test's examples from the plan, counts calls of its body and
    writes what happened as JSON lines."""

    def __init__(self, plan: dict[str, int], default: int, events: Path) -> None:
        self.plan, self.default, self.events = plan, default, events
        self.current: str | None = None
        self.runs: int | None = None
        self.started = 0.0
        self.call_s = 0.0
        self.failures: list[str] = []

    def _write(self, record: dict[str, Any]) -> None:
        with open(self.events, "a") as out:  # a line per event survives a killed round
            out.write(json.dumps(record) + "\n")

    def _counted(self, inner: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(inner)
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.runs = (self.runs or 0) + 1
            return inner(*args, **kwargs)

        counted._shipyard_fuzz_counted = True  # type: ignore[attr-defined]
        return counted

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.current, self.runs, self.call_s, self.failures = nodeid, None, 0.0, []
        self.started = time.monotonic()
        self._write({"event": "start", "test": nodeid})

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> None:
        from hypothesis import settings

        test = getattr(getattr(item, "obj", None), "__func__", getattr(item, "obj", None))
        handle = getattr(test, "hypothesis", None)
        if handle is None:  # not a @given test (a state machine runs its own settings)
            return
        self.runs = 0
        if not getattr(handle.inner_test, "_shipyard_fuzz_counted", False):
            handle.inner_test = self._counted(handle.inner_test)
        # Settings given in the test's decorator win over a profile, so the plan sets them here.
        examples = self.plan.get(item.nodeid, self.default)
        test._hypothesis_internal_use_settings = settings(  # type: ignore[union-attr]
            test._hypothesis_internal_use_settings,  # type: ignore[union-attr]
            max_examples=examples,
            deadline=None,
        )

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        yield
        if call.when == "call":
            self.call_s += call.duration
        if call.excinfo is not None and not call.excinfo.errisinstance(pytest.skip.Exception):
            self.failures += [_signature(exc) for exc in _leaves(call.excinfo.value)]

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        self._write(
            {
                "event": "end",
                "test": nodeid,
                "runs": self.runs,
                "call_s": round(self.call_s, 4),
                "total_s": round(time.monotonic() - self.started, 4),
                "failures": sorted(set(self.failures)),
            }
        )


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    """The exceptions a group holds (hypothesis reports several distinct bugs as one group)."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


def _signature(exc: BaseException) -> str:
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first}"[:200]


def pytest_configure(config: pytest.Config) -> None:
    """Registers the plugin when the runner started this pytest (`-p fuzz` with its env)."""
    events = os.environ.get("SHIPYARD_FUZZ_EVENTS")
    if events:
        plan = json.loads(Path(os.environ["SHIPYARD_FUZZ_PLAN"]).read_text())
        plugin = _Plugin(plan["examples"], plan["default"], Path(events))
        config.pluginmanager.register(plugin, "shipyard-fuzz")


# ---------------------------------------------------------------------------------------------
# The runner


@dataclass
class Target:
    """What the rounds found about one test."""

    runs: int = 0
    counted: bool = False  # whether its runs are known (a @given test's are)
    rounds: int = 0
    per_run_s: float = 0.0  # body time per run, from the last round
    fixed_s: float = 0.0  # setup and teardown per round
    failures: dict[str, int] = field(default_factory=dict)  # exception → the seed that found it


@dataclass
class Round:
    """What one pytest process reported."""

    ends: list[dict[str, Any]]  # one end event per test
    wall_s: float
    exit_code: int
    uncollected: set[str]  # test files pytest could not import


def run_round(
    tests: list[str], plan: dict[str, int], default: int, per_test_s: float, seed: int, work: Path
) -> Round:
    """One pytest process over the `fuzz` tests. A file that does not import is reported, not
    fatal: the other tests still run. A test that runs past `per_test_s` fails (pytest-timeout)
    and the round goes on; a round that pytest-timeout cannot stop is killed, and the test it was
    in ends as a hang."""
    timeout = 120 + per_test_s * max(len(plan), 1) * 2
    plan_file, events = work / "plan.json", work / "events.jsonl"
    plan_file.write_text(json.dumps({"examples": plan, "default": default}))
    events.write_text("")
    env = {
        **os.environ,
        "SHIPYARD_FUZZ_PLAN": str(plan_file),
        "SHIPYARD_FUZZ_EVENTS": str(events),
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH")])
        ),
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "fuzz",
        "--continue-on-collection-errors",
        "-m",
        "fuzz",
        "--hypothesis-profile=fuzz",
        f"--hypothesis-seed={seed}",
        f"--timeout={int(per_test_s) + 1}",
        *tests,
    ]
    started = time.monotonic()
    proc = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
    wall = time.monotonic() - started
    records = [json.loads(line) for line in events.read_text().splitlines() if line]
    ends = [r for r in records if r["event"] == "end"]
    ended = {r["test"] for r in ends}
    for hung in [r["test"] for r in records if r["event"] == "start" and r["test"] not in ended]:
        ends.append(
            {
                "test": hung,
                "runs": None,
                "call_s": wall,
                "total_s": wall,
                "failures": [f"hang: killed after {timeout:.0f} s"],
            }
        )
    if proc.returncode not in (0, 1) and not ends:  # 1: tests failed; else pytest itself did
        print(output, file=sys.stderr)
    uncollected = set(re.findall(r"ERROR collecting (\S+)", output))
    return Round(ends, wall, -9 if proc.returncode is None else proc.returncode, uncollected)


def plan_round(targets: dict[str, Target], seconds: float) -> dict[str, int]:
    """Examples per test so that the round's bodies share `seconds` equally."""
    share = max(seconds - sum(t.fixed_s for t in targets.values()), 0.0) / max(len(targets), 1)
    return {
        test: min(MAX_EXAMPLES, max(1, int(share / max(t.per_run_s, 1e-6))))
        for test, t in targets.items()
    }


def fuzz(tests: list[str], seconds: float) -> tuple[dict[str, Target], float, set[str]]:
    """Rounds until `seconds` have passed: each test's findings, the seconds taken, and the test
    files that did not import."""
    targets: dict[str, Target] = {}
    uncollected: set[str] = set()
    started = time.monotonic()
    deadline = started + seconds
    plan: dict[str, int] = {}
    default, overhead, last_round = CALIBRATION_EXAMPLES, 0.0, 0.0
    rounds: list[int] = []
    with tempfile.TemporaryDirectory(prefix="shipyard-fuzz-") as tmp:
        while True:
            left = deadline - time.monotonic()
            if targets and left < overhead + 1:
                break
            length = min(left, max(MIN_ROUND_S, 2 * last_round))
            if targets:
                plan = plan_round(targets, length - overhead)
            # a test runs past its share only when it hangs or its first runs misled the plan
            per_test_s = 60 + (3 * length / len(targets) if targets else seconds)
            seed = random.getrandbits(64)
            result = run_round(tests, plan, default, per_test_s, seed, Path(tmp))
            ends, wall = result.ends, result.wall_s
            uncollected |= result.uncollected
            if not ends:
                raise SystemExit(
                    f"fuzz: pytest ran no `fuzz` tests in {tests} (exit {result.exit_code})"
                )
            for end in ends:
                target = targets.setdefault(end["test"], Target())
                target.runs += end["runs"] or 0
                target.counted |= end["runs"] is not None
                target.rounds += 1
                for failure in end["failures"]:
                    target.failures.setdefault(failure, seed)
                if end["runs"]:
                    target.per_run_s = end["call_s"] / end["runs"]
                target.fixed_s = max(end["total_s"] - end["call_s"], 0.0)
            overhead = max(wall - sum(end["total_s"] for end in ends), 0.0)
            last_round = wall
            runs = sum(end["runs"] or 0 for end in ends)
            print(
                f"round {len(rounds) + 1}: seed {seed}, {runs:,} runs in {wall:.1f} s",
                file=sys.stderr,
            )
            rounds.append(seed)
            default = 1  # a test that appears after the first round runs one example
    return targets, time.monotonic() - started, uncollected


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0, help="about how long to run")
    parser.add_argument(
        "--tests", nargs="+", default=["tests"], help="where pytest looks for `fuzz` tests"
    )
    args = parser.parse_args()
    targets, elapsed, uncollected = fuzz(args.tests, args.seconds)
    width = max(len(test) for test in targets)
    for test, target in sorted(targets.items()):
        print(
            f"{test:<{width}}  {f'{target.runs:,}' if target.counted else '?':>10} runs "
            f"in {target.rounds} rounds  "
            f"{len(target.failures)} uncaught"
        )
        for failure, seed in sorted(target.failures.items()):
            print(f"    {failure}  (pytest --hypothesis-seed={seed} {test})")
    for path in sorted(uncollected):
        print(f"not fuzzed: {path} does not import (pytest {path})")
    uncaught = sum(len(target.failures) for target in targets.values())
    runs = sum(target.runs for target in targets.values())
    print(
        json.dumps(
            {
                "name": "fuzz",
                "value": uncaught,
                "unit": "uncaught exceptions",
                "runs": runs,
                "targets": len(targets),
                "seconds": round(elapsed, 1),
            }
        )
    )
    print(
        f"fuzz: {uncaught} uncaught exceptions in {elapsed:.0f} s over {len(targets)} targets "
        "(goal: 0)"
    )
    return 1 if uncaught else 0


if __name__ == "__main__":
    sys.exit(main())
