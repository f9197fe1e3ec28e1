"""A small run of `benchmarks/signing_cost.py`: it completes and prints its ratio line (the
figures themselves are the benchmark's business, not a test's)."""

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).parents[2] / "benchmarks" / "signing_cost.py"


def test_the_benchmark_runs_small_and_reports_its_ratio(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--size-mib", "4", "--piece-mib", "1", "--runs", "1",
         "--workdir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    *_, summary, last = done.stdout.strip().splitlines()
    assert summary.startswith("sign ") and "ratio" in summary
    report = json.loads(last)
    assert report["name"] == "signing_cost" and report["size_mib"] == 4
    assert report["ratio"] > 0 and report["sign_ms"] > 0 and report["verify_ms"] > 0
    assert 0 < report["gate_share"] < 1
    assert list(tmp_path.iterdir()) == []  # it removed its stores and copies
