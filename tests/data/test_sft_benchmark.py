"""A small run of benchmarks/finetune_throughput.py on a tiny random Llama: both sides train on the
same data and shape, and a killed run resumes to the same losses. Speed is not checked."""

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "finetune_throughput.py"
RUN_TIMEOUT_S = 1500  # only a hang should reach it: a shared host at load 40 is 10x slower


@pytest.mark.slow
@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
def test_finetune_benchmark_compares_like_with_like(
    tiny_llama_dirs: Callable[[int], Path], tmp_path: Path
) -> None:
    args = ["--model", str(tiny_llama_dirs(0)), "--quick", "--steps", "5", "--kill-at", "3"]
    done = subprocess.run(
        [sys.executable, str(BENCHMARK), *args, "--examples", "40", "--checkpoint-every", "2"],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["name"] == "finetune_throughput" and result["unit"] == "ratio"
    assert result["baseline_steps"] == result["shipyard_steps"] == 5
    assert result["tokens_per_step"] == result["batch"] * result["seq_len"] == 2 * 64
    assert result["baseline_tokens_per_s"] > 0 and result["shipyard_tokens_per_s"] > 0
    # the rank really was killed, and its resumed run retraced the uninterrupted one
    assert result["resumed_attempts"] == 2 and len(result["losses"]) == 5
    assert result["losses_equal"] and result["losses"] == result["resumed_losses"]
    assert list(tmp_path.iterdir()) == []  # the work directory is gone
