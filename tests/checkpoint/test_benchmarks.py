"""Small runs of the checkpoint benchmarks: they run and report what they claim."""

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
RUN_TIMEOUT_S = 1500  # only a hang should reach it: a shared host at load 40 is 10x slower


def _run(script: str, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"name", "value", "unit"} <= result.keys()
    return result


@pytest.mark.slow
@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
def test_crash_benchmark_finds_no_torn_checkpoint() -> None:
    result = _run("checkpoint_crash.py", "--kills", "6", "--mb", "2", "--seed", "1")
    assert result["kills"] == 6
    assert result["torn"] == 0 and result["lost"] == 0


@pytest.mark.slow
@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
def test_stall_benchmark_pairs_every_method_against_dcp_async() -> None:
    args = ["--width", "256", "--layers", "2", "--batch", "8", "--repeat", "2", "--window", "3"]
    result = _run("checkpoint_stall.py", *args)
    methods = result["methods"]
    assert set(methods) == {"shipyard_async", "shipyard_sync", "dcp_async", "dcp_sync"}
    assert result["pairs"] == 2 and result["window_steps"] == 3
    assert result["value"] == methods["shipyard_async"]["stall_s"]
    assert result["baseline"] == methods["dcp_async"]["stall_s"]
    for figure in methods.values():  # a median of paired differences lies inside its interval
        low, high = figure["ci95"]
        assert low <= figure["stall_s"] <= high
        assert figure["blocked_s"] >= 0
    if result["baseline"] > 0:
        assert result["ratio"] == pytest.approx(result["value"] / result["baseline"])
