"""Real processes for the console's end-to-end tests: `shipyard` commands on a temp home."""

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path


def shipyard_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHIPYARD_")}
    return {**env, "SHIPYARD_HOME": str(home), "OMP_NUM_THREADS": "1"}


def start(args: list[str], home: Path, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "shipyard", *args],
            env=shipyard_env(home),
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def wait_for(what: str, ready: Callable[[], bool], deadline_s: float = 60.0) -> None:
    """Poll `ready` until it holds; fail naming `what` after the deadline."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if ready():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} not ready after {deadline_s}s")


def answers(url: str) -> Callable[[], bool]:
    def ready() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return True
        except OSError:
            return False

    return ready


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
