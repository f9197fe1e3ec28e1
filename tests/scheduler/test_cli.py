"""`shipyard scheduler serve` as a real process, driven by `shipyard job` and its HTTP API."""

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CONFIG = {
    "nodes": [{"name": "n0", "gpus": 4}, {"name": "n1", "gpus": 4}],
    "teams": [{"team": "a", "nominal": {"gpu": 8}}],
}


def shipyard(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "shipyard.cli.main", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def call(url: str, method: str = "GET", body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def wait_for(check: Any, limit: float = 30.0) -> Any:
    deadline = time.monotonic() + limit
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.1)


@pytest.fixture
def server(shipyard_home: Path, tmp_path: Path) -> Iterator[str]:
    config = tmp_path / "cluster.json"
    config.write_text(json.dumps(CONFIG))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [sys.executable, "-m", "shipyard.cli.main", "scheduler", "serve"]
    cmd += ["--config", str(config), "--port", str(port), "--tick", "0.1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return call(url + "/status")[0] == 200
        except OSError:
            return False

    wait_for(up)
    yield url
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)


def test_submit_status_cancel(server: str, tmp_path: Path, shipyard_home: Path) -> None:
    out = tmp_path / "gpus.txt"
    script = f"import os; open({str(out)!r}, 'w').write(os.environ['CUDA_VISIBLE_DEVICES'])"
    submitted = shipyard(
        "job", "submit", "--team", "a", "--gpus", "8", "--gpus-per-node", "4",
        "--time-limit", "2m", "--", sys.executable, "-c", script,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    wait_for(lambda: call(f"{server}/jobs/{job_id}")[1]["state"] == "done")
    row = call(f"{server}/jobs/{job_id}")[1]
    assert row["gpus"] == {"n0": [0, 1, 2, 3], "n1": [0, 1, 2, 3]}
    assert out.read_text() == "0,1,2,3"
    assert (shipyard_home / "catalog.db").exists()  # the queue lives in the catalog database

    spec = {"team": "a", "gpus": 2, "time_limit": 60, "command": ["sleep", "60"], "grace": 1}
    code, body = call(f"{server}/jobs", "POST", spec)
    assert code == 200
    sleeper = body["id"]
    wait_for(lambda: call(f"{server}/jobs/{sleeper}")[1]["state"] == "running")
    status = call(f"{server}/status")[1]
    assert status["free_gpus"] == 6 and status["largest_gang"]["4_per_node"] == 4
    cancelled = shipyard("job", "cancel", sleeper)
    assert cancelled.stdout.split() == [sleeper, "cancelling"]
    wait_for(lambda: call(f"{server}/jobs/{sleeper}")[1]["state"] == "cancelled")
    listing = shipyard("job", "status").stdout
    # A drained node takes no new work: a 2 × 4 gang now waits.
    assert call(f"{server}/nodes/n1/state", "POST", {"state": "drained"})[0] == 200
    spec = {"team": "a", "gpus": 8, "gpus_per_node": 4, "time_limit": 60, "command": ["true"]}
    waiting = call(f"{server}/jobs", "POST", spec)[1]["id"]
    time.sleep(1.0)  # several passes
    assert call(f"{server}/jobs/{waiting}")[1]["state"] == "queued"
    assert call(f"{server}/status")[1]["nodes"] == {"n0": "up", "n1": "drained"}
    assert call(f"{server}/nodes/n1/state", "POST", {"state": "broken"})[0] == 400
    with urllib.request.urlopen(f"{server}/metrics", timeout=10) as response:
        metrics = response.read().decode()
    assert 'shipyard_scheduler_events_total{event="done"} 1' in metrics
    assert 'shipyard_scheduler_events_total{event="cancelled"} 1' in metrics
    assert "shipyard_scheduler_queued_jobs 1" in metrics
    assert f"{job_id}  done" in listing and f"{sleeper}  cancelled" in listing


def test_bad_requests_are_refused(server: str) -> None:
    spec: dict[str, Any] = {"team": "zz", "gpus": 1, "time_limit": 5, "command": ["true"]}
    code, body = call(f"{server}/jobs", "POST", spec)
    assert code == 400 and "team 'zz' has no quota" in body["error"]
    spec.update(team="a", gpus=3, gpus_per_node=2)
    code, body = call(f"{server}/jobs", "POST", spec)
    assert code == 400 and "gpus_per_node 2" in body["error"]
    assert call(f"{server}/jobs/nope")[0] == 404
    bad = shipyard("job", "submit", "--team", "a", "--gpus", "1", "--time-limit", "soon", "--", "x")
    assert bad.returncode == 2 and "bad duration 'soon'" in bad.stderr


def test_simulate_command(tmp_path: Path) -> None:
    trace = tmp_path / "philly.csv"
    rows = ["timestamp,duration,num_gpus,gpu_time,cluster"]
    for k in range(40):
        rows.append(f"2017-10-01 00:{k:02d}:00,{600 + 60 * k},{1 + k % 8},0,vc1")
    trace.write_text("\n".join(rows) + "\n")
    (tmp_path / "philly_vc.csv").write_text("vc,node num\nvc1,2\n")
    for policy in ("fifo", "shipyard"):
        result = shipyard(
            "scheduler", "simulate", "--trace", str(trace), "--policy", policy, "--json"
        )
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        assert report["jobs"] == 40 and report["unfinished"] == 0
        assert report["avg_jct"] >= sum(600 + 60 * k for k in range(40)) / 40
        # 40 jobs of 1–8 GPUs on 16 GPUs keep the cluster busy for several hours.
        series = report["fragmentation_series"]
        assert [hour for hour, _, _ in series] == list(range(len(series)))
        assert len(series) >= 2
        assert all(0 <= free <= 16 and 0 <= frac <= 1 for _, free, frac in series)
    csv = tmp_path / "frag.csv"
    result = shipyard(
        "scheduler", "simulate", "--trace", str(trace), "--fragmentation-csv", str(csv)
    )
    assert result.returncode == 0, result.stderr
    lines = csv.read_text().splitlines()
    assert lines[0] == "hour,free_gpus,scattered_fraction" and len(lines) >= 3
    unknown = shipyard("scheduler", "simulate", "--trace", str(trace), "--policy", "magic")
    assert unknown.returncode == 2 and "policy 'magic' unknown" in unknown.stderr
