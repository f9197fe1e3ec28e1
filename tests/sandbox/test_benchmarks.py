"""Small runs of the sandbox benchmarks: they work and report what they say (not how fast)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def run(script: str, *args: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=BENCHMARKS,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


@pytest.mark.slow
def test_sandbox_start_small() -> None:
    report = run("sandbox_start.py", "--episodes", "8", "--concurrency", "2", "--force")
    assert report["name"] == "sandbox_start" and report["episodes"] == 8
    assert float(report["value"]) > 0 and float(report["baseline"]) > 0  # type: ignore[arg-type]
    assert float(report["episodes_per_s"]) > 0  # type: ignore[arg-type]


@pytest.mark.slow
def test_sandbox_leaks_small() -> None:
    report = run("sandbox_leaks.py", "--episodes", "30", "--kill-rate", "0.1", "--force")
    assert report["episodes"] >= 30  # type: ignore[operator]
    assert report["value"] == 0, report
