"""A small run of the loader benchmark: it runs and reports what it claims."""

import json
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_loader_benchmark_compares_with_memmap() -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(BENCHMARKS / "loader_throughput.py"),
            *("--tokens", "600000", "--rounds", "2"),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["name"] == "loader_throughput" and result["unit"] == "tokens/s"
    assert result["value"] > 0 and result["baseline"] > 0 and result["tokens"] > 0
    for key in ("", "held_"):  # first pass over fresh mappings (headline), then held mappings
        low, high = result[key + "ratio_range"]
        assert 0 < low <= result[key + "ratio"] <= high and result["rounds"] == 2
        assert result[key + "value"] > 0 and result[key + "baseline"] > 0
    # The DataLoader pair is reported beside the headline, against its own baseline.
    loader, base = result["dataloader"], result["dataloader_baseline"]
    assert loader > 0 and base > 0 and result["dataloader_transport_ceiling"] > 0
    assert abs(result["dataloader_ratio"] - loader / base) < 1e-3
