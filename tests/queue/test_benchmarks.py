"""Small runs of the queue benchmarks: their figures are right, whatever the speed."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from shipyard.db.cluster import Cluster

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"


def run(script: str, *args: str) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    figures: dict[str, object] = json.loads(result.stdout.splitlines()[-1])
    return figures


@pytest.mark.slow
def test_throughput_drains_every_item_on_each_system(pg_cluster: Cluster) -> None:
    figures = run("queue_throughput.py", "--items", "200", "--workers", "2")
    assert isinstance(figures["value"], float) and figures["value"] > 0
    assert isinstance(figures["sqlite"], float) and figures["sqlite"] > 0
    for baseline in ("pgqueuer", "procrastinate"):  # null where not installed
        assert figures[baseline] is None or float(str(figures[baseline])) > 0


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_chaos_loses_nothing_and_doubles_nothing(pg_cluster: Cluster, backend: str) -> None:
    figures = run(
        "queue_chaos.py",
        "--items",
        "400",
        "--workers",
        "3",
        "--kill-every",
        "0.3",
        "--restart-at",
        "0.05",
        "--backend",
        backend,
    )
    assert figures["lost"] == figures["double_effects"] == figures["stale_completions"] == 0
    assert figures["wrongly_dead"] == figures["done_without_effect"] == 0
    assert figures["dead"] == figures["built_to_fail"] == 4
    assert isinstance(figures["kills"], int) and figures["kills"] > 0
    assert figures["db_restarts"] == (1 if backend == "postgresql" else 0)
