"""A small run of the loader benchmark: it runs and reports what it claims."""

import json
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_loader_benchmark_compares_with_memmap() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "loader_throughput.py"), "--tokens", "600000"],
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["name"] == "loader_throughput" and result["unit"] == "tokens/s"
    assert result["value"] > 0 and result["baseline"] > 0 and result["tokens"] > 0
