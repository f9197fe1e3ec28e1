"""Small runs of the checkpoint benchmarks: they run and report what they claim."""

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _run(script: str, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"name", "value", "unit"} <= result.keys()
    return result


@pytest.mark.slow
def test_crash_benchmark_finds_no_torn_checkpoint() -> None:
    result = _run("checkpoint_crash.py", "--kills", "6", "--mb", "2", "--seed", "1")
    assert result["kills"] == 6
    assert result["torn"] == 0 and result["lost"] == 0


@pytest.mark.slow
def test_stall_benchmark_compares_with_dcp() -> None:
    args = ["--width", "256", "--layers", "2", "--batch", "8", "--repeat", "1"]
    result = _run("checkpoint_stall.py", *args)
    assert result["baseline"] > 0 and result["dcp_async_stall"] >= 0
    assert result["ratio"] == pytest.approx(
        result["value"] / result["baseline"], rel=0.05, abs=0.01
    )
