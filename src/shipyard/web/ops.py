"""What the console shows about the services: scheduler, work queues, data runs, peers."""

from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

from shipyard.errors import ShipyardError
from shipyard.httpguard import call


def scheduler(scheduler_url: str) -> dict[str, Any]:
    """Jobs per team and state from the job store; free GPUs, largest gang and usage from the
    running service when it answers (`status` is null otherwise, with the reason)."""
    from shipyard.scheduler.store import JobStore

    store = JobStore()
    try:
        jobs = store.list()
    finally:
        store.close()
    teams: dict[str, Counter[str]] = {}
    for job in jobs:
        teams.setdefault(str(job["spec"].get("team", "?")), Counter())[job["state"]] += 1
    live: dict[str, Any] | None = None
    error = ""
    try:
        live = call(scheduler_url.rstrip("/") + "/status")
    except ShipyardError as exc:
        error = str(exc)
    return {
        "url": scheduler_url,
        "status": live,
        "status_error": error,
        "teams": {team: dict(counts) for team, counts in sorted(teams.items())},
        # A job's command holds paths, arguments and sometimes secrets; the scheduler's own API
        # shows it only to its token's holders, and the console never shows it at all.
        "jobs": [{k: v for k, v in job.items() if k != "command"} for job in jobs[-500:]],
    }


def cancel_job(job_id: str) -> dict[str, Any]:
    """Cancel a job in the store the service reads (a running one is stopped on its next pass)."""
    from shipyard.scheduler.store import JobStore

    store = JobStore()
    try:
        return {"id": job_id, "state": store.cancel(job_id)}
    finally:
        store.close()


def queues() -> dict[str, Any]:
    """Depth, oldest item and dead letters (with their attempt histories) of every queue."""
    from shipyard.queue import open_queue

    queue = open_queue()
    try:
        stats = [asdict(s) for s in queue.stats()]
        dead = {s["queue"]: [asdict(r) for r in queue.dead(s["queue"], 50)] for s in stats}
    finally:
        queue.close()
    return {"queues": stats, "dead": dead}


def requeue(queue_name: str, item_ids: list[int] | None) -> dict[str, Any]:
    from shipyard.queue import open_queue

    queue = open_queue()
    try:
        return {"queue": queue_name, "requeued": queue.requeue(queue_name, item_ids)}
    finally:
        queue.close()


def data_runs(home: Path) -> list[dict[str, Any]]:
    """Every data pipeline run's statistics, newest first."""
    from shipyard.data import stats

    folder = stats.runs_dir(home)
    ids = [p.stem for p in folder.glob("*.json")] if folder.is_dir() else []
    runs = [stats.load(home, run_id) for run_id in ids]
    return sorted(runs, key=lambda r: r.get("saved_at", 0), reverse=True)


def data_run(home: Path, ref: str, threshold: float = 0.05) -> dict[str, Any]:
    """One run's funnel, quarantine reasons and drift flags against the run before it."""
    from shipyard.data import stats

    current = stats.load(home, ref)
    before = stats.previous(home, current)
    flags = stats.drift(current, before, threshold) if before else []
    return {**current, "drift": flags, "drift_against": before["run"] if before else None}


def peers(addresses: list[str], swarm_key_file: Path | None) -> list[dict[str, Any]]:
    """Each peer daemon's status (holdings, bytes from peers and origin), or why it is silent."""
    from shipyard.distribute.client import daemon_status
    from shipyard.distribute.config import parse_address
    from shipyard.distribute.swarm_key import SwarmKey

    key = SwarmKey.load(swarm_key_file) if swarm_key_file else None
    out: list[dict[str, Any]] = []
    for address in addresses:
        try:
            out.append({"peer": address, "status": daemon_status(parse_address(address), key)})
        except (ShipyardError, OSError) as exc:
            out.append({"peer": address, "status": None, "error": str(exc)})
    return out
