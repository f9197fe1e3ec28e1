"""`shipyard scheduler serve` as a real process, driven by `shipyard job` and its HTTP API."""

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.conftest import free_port

from .live import Live, scheduler, shipyard, wait_for


@pytest.fixture
def server(shipyard_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Live]:
    with scheduler(shipyard_home, tmp_path) as live:
        monkeypatch.setenv("SHIPYARD_SCHEDULER_URL", live.url)  # for the `shipyard job` calls
        yield live


def samples(live: Live) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The service's metrics, parsed: (sample name, sorted labels) → value."""
    code, text = live.request("GET", "/metrics")
    assert code == 200
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_submit_status_cancel(server: Live, tmp_path: Path, shipyard_home: Path) -> None:
    out = tmp_path / "gpus.txt"
    script = f"import os; open({str(out)!r}, 'w').write(os.environ['CUDA_VISIBLE_DEVICES'])"
    submitted = shipyard(
        "job", "submit", "--team", "a", "--gpus", "8", "--gpus-per-node", "4",
        "--time-limit", "2m", "--", sys.executable, "-c", script,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    wait_for(lambda: server.request("GET", f"/jobs/{job_id}")[1]["state"] == "done")
    row = server.request("GET", f"/jobs/{job_id}")[1]
    assert row["gpus"] == {"n0": [0, 1, 2, 3], "n1": [0, 1, 2, 3]}
    assert out.read_text() == "0,1,2,3"
    assert (shipyard_home / "catalog.db").exists()  # the queue lives in the catalog database
    shown = shipyard("job", "status", job_id)
    assert shown.returncode == 0 and json.loads(shown.stdout)["state"] == "done"

    spec = {"team": "a", "gpus": 2, "time_limit": 60, "command": ["sleep", "60"], "grace": 1}
    code, body = server.request("POST", "/jobs", spec)
    assert code == 200
    sleeper = body["id"]
    wait_for(lambda: server.request("GET", f"/jobs/{sleeper}")[1]["state"] == "running")
    status = server.request("GET", "/status")[1]
    assert status["free_gpus"] == 6 and status["largest_gang"]["4_per_node"] == 4
    cancelled = shipyard("job", "cancel", sleeper)
    assert cancelled.stdout.split() == [sleeper, "cancelling"]
    wait_for(lambda: server.request("GET", f"/jobs/{sleeper}")[1]["state"] == "cancelled")
    listing = shipyard("job", "status").stdout
    assert f"{job_id}  done" in listing and f"{sleeper}  cancelled" in listing
    metrics = samples(server)
    assert metrics[("shipyard_scheduler_events_total", (("event", "done"),))] == 1
    assert metrics[("shipyard_scheduler_events_total", (("event", "cancelled"),))] == 1


def test_drained_node_takes_no_new_work(server: Live) -> None:
    assert server.request("POST", "/nodes/n1/state", {"state": "drained"})[0] == 200
    assert server.request("GET", "/status")[1]["nodes"] == {"n0": "up", "n1": "drained"}
    spec = {"team": "a", "gpus": 8, "gpus_per_node": 4, "time_limit": 60, "command": ["true"]}
    waiting = server.request("POST", "/jobs", spec)[1]["id"]
    # The service has taken the job into its queue (it counts as queued only once a pass has
    # seen it and left it there), and then run two more passes without starting it.
    wait_for(lambda: samples(server)[("shipyard_scheduler_queued_jobs", ())] == 1)
    seen = samples(server)[("shipyard_scheduler_passes_total", ())]
    wait_for(lambda: samples(server)[("shipyard_scheduler_passes_total", ())] >= seen + 2)
    row = server.request("GET", f"/jobs/{waiting}")[1]
    assert row["state"] == "queued"
    assert row["condition"]["reason"] == "Inadmissible"
    assert row["condition"]["message"] == "asks 8 GPUs, the cluster has 4 healthy 'gpu' GPUs"
    listing = shipyard("job", "status").stdout
    assert "Inadmissible: asks 8 GPUs, the cluster has 4 healthy 'gpu' GPUs" in listing
    assert ("shipyard_scheduler_events_total", (("event", "admit"),)) not in samples(server)
    assert server.request("POST", "/nodes/n1/state", {"state": "broken"})[0] == 400
    # Back up, the node takes the gang at once: the wait above was the drain, not a dead loop.
    assert server.request("POST", "/nodes/n1/state", {"state": "up"})[0] == 200
    wait_for(lambda: server.request("GET", f"/jobs/{waiting}")[1]["state"] == "done")


def test_bad_requests_are_refused(server: Live) -> None:
    spec: dict[str, Any] = {"team": "zz", "gpus": 1, "time_limit": 5, "command": ["true"]}
    code, body = server.request("POST", "/jobs", spec)
    assert code == 400 and "team 'zz' has no quota" in body["error"]
    spec.update(team="a", gpus=3, gpus_per_node=2)
    code, body = server.request("POST", "/jobs", spec)
    assert code == 400 and "gpus_per_node 2" in body["error"]
    for field, value in (("gpus", True), ("gpus", 1.5), ("time_limit", "5"), ("team", 7)):
        code, body = server.request("POST", "/jobs", {**spec, "gpus_per_node": None, field: value})
        assert code == 400 and f"submit: {field} = " in body["error"], body
    code, body = server.request("POST", "/jobs", {**spec, "gpus": 1, "preemptions": 99})
    assert code == 400 and "unknown fields ['preemptions']" in body["error"]
    assert server.request("GET", "/jobs/nope")[0] == 404
    bad = shipyard("job", "submit", "--team", "a", "--gpus", "1", "--time-limit", "soon", "--", "x")
    assert bad.returncode == 2 and "bad duration 'soon'" in bad.stderr
    refused = shipyard(
        "job", "submit", "--team", "zz", "--gpus", "1", "--time-limit", "5", "--", "x"
    )
    assert refused.returncode == 2 and "team 'zz' has no quota" in refused.stderr
    missing = shipyard("job", "status", "nope")
    assert missing.returncode == 4 and "job 'nope' not found" in missing.stderr
    assert server.request("GET", "/jobs")[1] == []


def test_job_commands_without_a_scheduler_exit_6(shipyard_home: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens here
    for args in (("status",), ("status", "abc"), ("cancel", "abc")):
        result = shipyard("job", *args, "--url", url)
        assert result.returncode == 6, (args, result)
        assert len(result.stderr.splitlines()) == 1 and url in result.stderr
        assert "Traceback" not in result.stderr and result.stdout == ""
    # With no token either (the scheduler never ran under this home), submit says so.
    result = shipyard("job", "submit", "--url", url, "--team", "a", "--gpus", "1",
                      "--time-limit", "5", "--", "true")  # fmt: skip
    assert result.returncode == 6 and "scheduler.token does not exist" in result.stderr
    assert url in result.stderr


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
    nowhere = shipyard(
        "scheduler", "simulate", "--trace", str(trace), "--fragmentation-csv", "/proc/nope/x.csv"
    )
    assert nowhere.returncode == 6 and "--fragmentation-csv /proc/nope/x.csv" in nowhere.stderr
    assert "a bug" not in nowhere.stderr


def test_serve_with_a_log_directory_it_cannot_make_exits_6(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({"nodes": [{"name": "n0", "gpus": 1}], "teams": [
        {"team": "a", "nominal": {"gpu": 1}}]}))  # fmt: skip
    result = shipyard(
        "scheduler", "serve", "--config", str(cluster), "--logs", "/proc/nope/logs", "--port", "0"
    )
    assert result.returncode == 6 and "job log directory /proc/nope/logs" in result.stderr
    assert "a bug" not in result.stderr
