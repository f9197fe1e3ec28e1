"""The `shipyard` command imports each command's machinery only when that command runs: a
restarted peer daemon rejoins sooner when it does not first load the data pipeline."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("rich", "pyarrow", "duckdb", "tokenizers", "torch", "shipyard.data", "shipyard.train")


def test_building_the_parser_imports_no_heavy_package() -> None:
    probe = (
        "import sys\n"
        "from shipyard.cli.main import build_parser\n"
        "build_parser()\n"
        "print('\\n'.join(sys.modules))\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    heavy = [m for m in loaded if any(m == h or m.startswith(h + ".") for h in HEAVY)]
    assert heavy == []


def test_the_start_benchmark_times_the_daemon_and_the_floor() -> None:
    script = Path(__file__).parents[2] / "benchmarks" / "peer_start.py"
    out = subprocess.run(
        [sys.executable, str(script), "--runs", "1"], capture_output=True, text=True, check=True
    ).stdout
    result = json.loads(out.splitlines()[-1])
    assert result["name"] == "peer_start"
    assert result["value"] > result["baseline"] > 0
    assert result["ratio"] == pytest.approx(result["value"] / result["baseline"], rel=0.05)
