"""The live service with the local backend: real processes, GPU ids, SIGTERM and grace."""

import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from shipyard.db import Database
from shipyard.scheduler.config import parse_config
from shipyard.scheduler.local import LocalBackend
from shipyard.scheduler.model import Job
from shipyard.scheduler.service import Service
from shipyard.scheduler.store import JobStore

CONFIG = {
    "nodes": [{"name": "n0", "gpus": 4}],
    "teams": [
        {"team": "a", "nominal": {"gpu": 2}, "cohort": "ab"},
        {"team": "b", "nominal": {"gpu": 2}, "cohort": "ab"},
    ],
}

# On SIGTERM writes "term" and exits; records its GPU ids once that handler is in place (so a
# test can wait for it); otherwise sleeps (unless told to end).
WORKER = """
import os, signal, sys, time
out = sys.argv[1]
if sys.argv[2] == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    def term(*_):
        open(out + ".term", "w").write("term")
        sys.exit(0)
    signal.signal(signal.SIGTERM, term)
open(out + ".tmp", "w").write(os.environ["CUDA_VISIBLE_DEVICES"])
os.replace(out + ".tmp", out + ".gpus")  # whole when it appears
if sys.argv[2] != "quick":
    time.sleep(60)
"""


@pytest.fixture
def service(tmp_path: Path, db_url: str) -> Service:
    store = JobStore(Database(db_url))
    config = parse_config(CONFIG)
    svc = Service(config, store, LocalBackend(config.nodes, tmp_path / "logs"))
    yield svc
    svc.backend.shutdown()


def until(svc: Service, done: Callable[[], bool], limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not done():
        assert time.monotonic() < deadline, "condition not reached"
        svc.tick()
        time.sleep(0.05)


def started(svc: Service, tmp: Path, name: str) -> None:
    """Wait until worker `name` runs with its SIGTERM handler in place (running is not enough:
    a signal before that would kill the interpreter instead)."""
    until(svc, lambda: (tmp / f"{name}.gpus").exists())


def submit(
    svc: Service, tmp: Path, name: str, team: str, gpus: int, mode: str, **kw: object
) -> str:
    job = Job("", team, gpus, 600.0, **kw)  # type: ignore[arg-type]
    script = tmp / "worker.py"
    script.write_text(WORKER)
    return svc.store.submit(job, [sys.executable, str(script), str(tmp / name), mode])


def test_runs_real_process_with_cuda_visible_devices(service: Service, tmp_path: Path) -> None:
    job_id = submit(service, tmp_path, "one", "a", 2, "quick")
    until(service, lambda: service.store.get(job_id)["state"] == "done")
    assert (tmp_path / "one.gpus").read_text() == "0,1"
    # The job's output is the user's alone (its command line may hold secrets, too).
    logs = tmp_path / "logs"
    assert stat.S_IMODE(logs.stat().st_mode) == 0o700
    assert [stat.S_IMODE(p.stat().st_mode) for p in logs.iterdir()] == [0o600]
    row = service.store.get(job_id)
    assert row["exit_code"] == 0 and row["gpus"] == {"n0": [0, 1]}
    assert service.state.free == [4]
    assert set(service.status()["allocated_gpu_hours"]) == {"a/guaranteed"}


def test_reclaim_sends_sigterm_and_requeues(service: Service, tmp_path: Path) -> None:
    victim = submit(service, tmp_path, "victim", "b", 4, "sleep", preemptible=True, grace=5.0)
    started(service, tmp_path, "victim")
    owner = submit(service, tmp_path, "owner", "a", 2, "sleep")
    started(service, tmp_path, "owner")
    assert (tmp_path / "victim.term").read_text() == "term"
    row = service.store.get(victim)
    assert row["state"] == "queued" and row["message"] == f"preempted by {owner}"
    assert row["spec"]["preemptions"] == 1
    assert (tmp_path / "owner.gpus").read_text() in ("0,1", "2,3")
    # Requeued, it comes back once the owner is gone (its team may borrow again).
    service.store.cancel(owner)
    until(service, lambda: service.store.get(victim)["state"] == "running")


def test_victim_ignoring_sigterm_is_killed_after_grace(service: Service, tmp_path: Path) -> None:
    victim = submit(service, tmp_path, "stubborn", "b", 4, "ignore", preemptible=True, grace=0.5)
    started(service, tmp_path, "stubborn")
    owner = submit(service, tmp_path, "owner", "a", 2, "quick")
    until(service, lambda: service.store.get(owner)["state"] == "done")
    assert not (tmp_path / "stubborn.term").exists()
    assert service.store.get(victim)["state"] in ("queued", "running")


def test_cancel_queued_and_running(service: Service, tmp_path: Path) -> None:
    running = submit(service, tmp_path, "long", "a", 4, "sleep", grace=2.0, preemptible=True)
    started(service, tmp_path, "long")
    queued = submit(service, tmp_path, "wait", "a", 2, "quick")
    assert service.store.cancel(queued) == "cancelled"
    assert service.store.cancel(running) == "cancelling"
    until(service, lambda: service.store.get(running)["state"] == "cancelled")
    assert (tmp_path / "long.term").read_text() == "term"
    assert service.store.get(queued)["state"] == "cancelled"
    assert service.state.free == [4] and not service.state.running


def test_idle_interactive_job_is_warned_then_reclaimed(tmp_path: Path, db_url: str) -> None:
    now = [1000.0]
    config = parse_config({**CONFIG, "idle_minutes": 1})
    store = JobStore(Database(db_url))
    svc = Service(config, store, LocalBackend(config.nodes, tmp_path / "logs"), lambda: now[0])
    try:
        job_id = submit(svc, tmp_path, "nb", "a", 1, "sleep", priority="interactive", grace=1.0)
        started(svc, tmp_path, "nb")
        now[0] += 30
        svc.report_utilization(job_id)  # busy: the idle clock restarts
        now[0] += 61
        svc.tick()
        assert store.get(job_id)["message"].startswith("idle")
        assert store.get(job_id)["state"] == "running"
        now[0] += 61
        until(svc, lambda: store.get(job_id)["state"] == "failed")
        assert store.get(job_id)["message"] == "reclaimed: idle"
        assert (tmp_path / "nb.term").read_text() == "term"
    finally:
        svc.backend.shutdown()


def test_unknown_priority_class_is_refused(service: Service, tmp_path: Path) -> None:
    job_id = submit(service, tmp_path, "odd", "a", 1, "quick", priority="urgent")
    until(service, lambda: service.store.get(job_id)["state"] == "failed")
    assert "priority 'urgent' unknown" in service.store.get(job_id)["message"]


def test_failed_launch_frees_the_gpus(service: Service, tmp_path: Path) -> None:
    job = Job("", "a", 2, 60.0)
    job_id = service.store.submit(job, [str(tmp_path / "no-such-program")])
    until(service, lambda: service.store.get(job_id)["state"] == "failed")
    assert service.store.get(job_id)["message"].startswith("launch:")
    assert service.state.free == [4] and not service.state.running
    # The backend got the GPU ids back: a later job still gets GPUs 0 and 1.
    later = submit(service, tmp_path, "later", "a", 2, "quick")
    until(service, lambda: service.store.get(later)["state"] == "done")
    assert (tmp_path / "later.gpus").read_text() == "0,1"


def test_metrics_escape_label_values(tmp_path: Path, db_url: str) -> None:
    team = 'we"ird\nteam\\x'
    config = parse_config({"nodes": [{"name": "n0", "gpus": 2}],
                           "teams": [{"team": team, "nominal": {"gpu": 2}}]})  # fmt: skip
    svc = Service(config, JobStore(Database(db_url)), LocalBackend(config.nodes, tmp_path))
    try:
        job_id = submit(svc, tmp_path, "odd", team, 2, "quick")
        until(svc, lambda: svc.store.get(job_id)["state"] == "done")
    finally:
        svc.backend.shutdown()
    families = {f.name: f for f in text_string_to_metric_families(svc.metrics().decode())}
    (charged,) = families["shipyard_scheduler_allocated_gpu_seconds"].samples
    assert charged.labels == {"team": team, "tier": "guaranteed"} and charged.value >= 0
    assert charged.value == svc.charged[(team, "guaranteed")]
    events = {s.labels["event"]: s.value for s in families["shipyard_scheduler_events"].samples}
    assert events == {"admit": 1, "done": 1}
    (passes,) = families["shipyard_scheduler_passes"].samples
    assert passes.name == "shipyard_scheduler_passes_total" and passes.value == svc.passes >= 1
    assert families["shipyard_scheduler_free_gpus"].samples[0].value == 2
    assert families["shipyard_scheduler_running_jobs"].samples[0].value == 0
