"""A small run of `benchmarks/scheduler_philly.py`: its report says what it claims."""

import json
import random
import subprocess
import sys
from pathlib import Path

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "scheduler_philly.py"


def small_trace(root: Path) -> Path:
    """Two VCs of two 8-GPU nodes, 120 jobs over two hours, mixed sizes and lengths."""
    traces = root / "traces"
    traces.mkdir(parents=True)
    rng = random.Random(7)
    rows = ["timestamp,duration,num_gpus,gpu_time,cluster"]
    for k in range(120):
        stamp = f"2017-10-01 {k // 60:02d}:{k % 60:02d}:00"
        gpus = rng.choice((1, 1, 1, 2, 4, 8))
        duration = rng.choice((30, 300, 1800, 7200))
        rows.append(f"{stamp},{duration},{gpus},{gpus * duration},{rng.choice(('va', 'vb'))}")
    (traces / "philly.csv").write_text("\n".join(rows) + "\n")
    (traces / "philly_vc.csv").write_text("vc,node num\nva,2\nvb,2\n")
    return root


def test_small_benchmark_report(tmp_path: Path) -> None:
    data = small_trace(tmp_path / "data")
    cmd = [sys.executable, str(BENCHMARK), "--data", str(data), "--busy", "0.3", "--sweep", "8"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["name"] == "scheduler_philly"
    # The load factor is the first on the grid that makes the pooled cluster 30% busy.
    search = report["load_search"]
    assert search[-1]["load_factor"] == report["load_factor"] and search[-1]["busy"] >= 0.3
    assert all(point["busy"] < 0.3 for point in search[:-1])
    start, end = report["busy_window_s"]
    assert start == 0 and end > 0
    assert report["limits"]["overestimate"] == 4.0 and report["limits"]["seed"] == 0
    assert report["limits"]["model"].startswith("limit = max(floor, duration * U)")
    arms = report["arms"]
    assert set(arms) == {"partitioned", "pooled", "shipyard"}
    # Every arm ran exactly the same jobs to the end.
    assert report["same_jobs"] is True
    assert len({arm["jobs_digest"] for arm in arms.values()}) == 1
    assert {arm["jobs"] for arm in arms.values()} == {120}
    assert all(arm["unfinished"] == 0 for arm in arms.values())
    for arm in arms.values():
        # JCT splits into true duration, the first wait, and what preemption added.
        parts = arm["avg_true_duration_s"] + arm["avg_first_wait_s"] + arm["avg_preemption_delay_s"]
        assert abs(parts - arm["avg_jct_s"]) < 0.5
        assert arm["avg_jct_s"] >= arm["avg_true_duration_s"]
        assert 0 < arm["jain_fairness"] <= 1 and 0 < arm["busy"] <= 1
        assert arm["lost_gpu_seconds"] >= 0
    assert arms["pooled"]["preemptions"] == arms["partitioned"]["preemptions"] == 0
    gain = arms["pooled"]["avg_jct_s"] / arms["shipyard"]["avg_jct_s"]
    assert abs(report["policy_gain"] - gain) < 1e-3
    (point,) = report["sweep"]
    assert point["load_factor"] == 8.0
    assert point["pooled"]["jobs_digest"] == point["shipyard"]["jobs_digest"]
