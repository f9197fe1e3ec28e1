"""Batch inference jobs for the console: each saved job's progress, ETA and cost, computed by
`batch.progress` from the work queue's own records."""

import json
from pathlib import Path
from typing import Any

from shipyard.batch import load_job, progress
from shipyard.batch.job import jobs_dir
from shipyard.batch.progress import GPU_SOURCE
from shipyard.db import database_url
from shipyard.errors import ShipyardError
from shipyard.queue import Queue, open_queue


def _created(job_id: str) -> float | None:
    try:
        created = json.loads((jobs_dir() / f"{job_id}.json").read_text()).get("created_at")
    except (OSError, ValueError, AttributeError):
        return None
    return float(created) if isinstance(created, int | float) else None


def _line(queue: Queue, job_id: str) -> dict[str, Any]:
    job = load_job(job_id)
    started = _created(job_id)
    summary: dict[str, Any] = {
        "job": job.id,
        "queue": job.queue,
        "snapshot": job.snapshot,
        "model": job.model,
        "runtime": job.encode.runtime,
        "created_at": started,
    }
    if job.queue not in queue.names():
        return {**summary, "state": "not submitted"}
    p = progress(queue, job, started)
    state = "done" if p.done == p.shards else ("failing" if p.dead else "running")
    return {
        **summary,
        "state": state,
        "shards": p.shards,
        "done": p.done,
        "running": p.leased,
        "dead": p.dead,
        "docs": p.docs,
        "chunks": p.chunks,
        "problems": p.problems,
        "elapsed_s": p.elapsed_s,
        "eta_s": None if state == "done" else p.eta_s,
        "cpu_seconds": p.cpu_seconds,
        "cpu_s_per_1k_chunks": p.cpu_s_per_1k_chunks,
        "gpu_s_per_1k_chunks_estimate": p.gpu_s_per_1k_chunks,
    }


def jobs(home: Path) -> dict[str, Any]:
    """Every saved job, newest first; a job whose record cannot be read says why instead."""
    folder = jobs_dir()
    paths = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    queue = open_queue(database_url(home))
    try:
        found = []
        for path in paths:
            try:
                found.append(_line(queue, path.stem))
            except ShipyardError as exc:
                found.append({"job": path.stem, "state": "unreadable", "error": str(exc)})
    finally:
        queue.close()
    return {"jobs": found, "gpu_source": GPU_SOURCE}
