"""Small runs of the sandbox benchmarks: they work and report what they say (not how fast), and
whatever happens to a run, it leaves nothing behind."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shipyard import children
from shipyard.errors import ShipyardError
from shipyard.sandbox import Host
from shipyard.sandbox.client import Client
from shipyard.sandbox.server import socket_path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
HANG_S = 600  # far past any run's length even on a loaded host: only a hang gets here
CLEANUP_S = 120  # how long a run asked to stop (SIGTERM) may take to clean up before SIGKILL
SMALL_LEAKS = ["--episodes", "12", "--drivers", "2", "--kill-rate", "0.2", "--force"]


def start(script: str, *args: str, logs: Path) -> subprocess.Popen[bytes]:
    """The benchmark in a process group of its own, its output in files: nothing it starts can
    hold a pipe of ours open."""
    logs.mkdir(parents=True, exist_ok=True)
    with open(logs / "stdout", "wb") as out, open(logs / "stderr", "wb") as err:
        return children.spawn(
            [sys.executable, str(BENCHMARKS / script), *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            cwd=BENCHMARKS,
        )


def finish(process: subprocess.Popen[bytes], logs: Path) -> dict[str, object]:
    try:
        process.wait(HANG_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"hung:\n{(logs / 'stderr').read_text()[-3000:]}") from None
    finally:
        children.stop(process, CLEANUP_S)  # a run still going cleans up; its group ends
    assert process.returncode == 0, (logs / "stderr").read_text()[-3000:]
    report: dict[str, object] = json.loads((logs / "stdout").read_text().splitlines()[-1])
    return report


def run(script: str, *args: str, logs: Path) -> dict[str, object]:
    return finish(start(script, *args, logs=logs), logs)


def assert_nothing_left(home: Path) -> None:
    host = Host(home)
    try:
        leaks = host.leaks()
    finally:
        host.close()
    assert leaks.total == 0, leaks


@pytest.mark.slow
def test_sandbox_start_small(tmp_path: Path) -> None:
    report = run(
        "sandbox_start.py", "--episodes", "8", "--concurrency", "2", "--force", logs=tmp_path
    )
    assert report["name"] == "sandbox_start" and report["episodes"] == 8
    assert float(report["value"]) > 0 and float(report["baseline"]) > 0  # type: ignore[arg-type]
    assert float(report["episodes_per_s"]) > 0  # type: ignore[arg-type]


@pytest.mark.slow
def test_sandbox_leaks_small(tmp_path: Path) -> None:
    home = tmp_path / "home"
    args = ["--episodes", "30", "--kill-rate", "0.1", "--force", "--home", str(home)]
    report = run("sandbox_leaks.py", *args, logs=tmp_path)
    assert report["episodes"] >= 30  # type: ignore[operator]
    assert report["value"] == 0, report
    assert_nothing_left(home)


@pytest.mark.slow
def test_sandbox_leaks_kills_drivers_whose_output_is_in_the_same_batch(tmp_path: Path) -> None:
    # A kill after every episode: with 4 drivers, some batch of ready pipes soon holds the one
    # killed, which the old loop then read after closing it.
    home = tmp_path / "home"
    args = ["--episodes", "40", "--drivers", "4", "--kill-rate", "1.0", "--force"]
    report = run("sandbox_leaks.py", *args, "--home", str(home), logs=tmp_path)
    assert report["value"] == 0, report
    assert report["drivers_killed"] >= 40  # type: ignore[operator]
    assert_nothing_left(home)


def running_episodes(home: Path) -> bool:
    """Whether the service on `home` is up and its drivers' execs are ending."""
    try:
        with Client(socket_path(home)) as client:
            return bool(client.status()["outcomes"])
    except ShipyardError:  # not up yet
        return False


@pytest.mark.slow
def test_an_interrupted_sandbox_leaks_run_leaves_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    args = ["--episodes", "1000000", "--force", "--home", str(home)]  # never ends on its own
    process = start("sandbox_leaks.py", *args, logs=tmp_path)
    try:
        deadline = time.monotonic() + HANG_S
        while not running_episodes(home):  # mid-run: drivers, sandboxes, cgroups all in use
            assert process.poll() is None, (tmp_path / "stderr").read_text()[-3000:]
            assert time.monotonic() < deadline, "the run never got under way"
            time.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        process.wait(HANG_S)
    finally:
        children.stop(process, CLEANUP_S)
    assert process.returncode == 128 + signal.SIGTERM, (tmp_path / "stderr").read_text()[-3000:]
    assert_nothing_left(home)


@pytest.mark.slow
@pytest.mark.timeout(5 * HANG_S)
def test_sandbox_leaks_five_runs_in_a_row(tmp_path: Path) -> None:
    """Leaks that build up across runs (cgroups, mounts, keeper groups) show by the fifth."""
    for number in range(5):
        home = tmp_path / f"home-{number}"
        report = run("sandbox_leaks.py", *SMALL_LEAKS, "--home", str(home), logs=tmp_path)
        assert report["value"] == 0, (number, report)
        assert_nothing_left(home)
