"""The live queue, persisted in the catalog's SQLite database in the scheduler's own table.

The service and the CLI each open their own connection; SQLite serializes the writers. A job's
row holds its spec (JSON), its command, its state, what the backend reported, and its condition
(why it waits, or that it was admitted: `{"reason", "message", "since"}` as JSON).
"""

import json
import os
import sqlite3
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from shipyard.catalog import ensure_catalog_file
from shipyard.errors import InvalidInput, NotFound
from shipyard.scheduler.model import Job
from shipyard.workspace import shipyard_home

STATES = ("queued", "running", "cancelling", "done", "failed", "cancelled")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS scheduler_jobs (
    id TEXT PRIMARY KEY,
    spec TEXT NOT NULL,
    command TEXT NOT NULL,
    state TEXT NOT NULL,
    submitted REAL NOT NULL,
    started REAL,
    finished REAL,
    gpus TEXT,
    exit_code INTEGER,
    message TEXT NOT NULL DEFAULT '',
    condition TEXT
);
CREATE INDEX IF NOT EXISTS scheduler_jobs_state ON scheduler_jobs(state);
"""


def catalog_path() -> Path:
    """The catalog database: `$SHIPYARD_CATALOG` (a path or sqlite:// URI) or the home default."""
    uri = os.environ.get("SHIPYARD_CATALOG")
    if not uri:
        return shipyard_home() / "catalog.db"
    parsed = urlparse(uri)
    if parsed.scheme == "sqlite":
        return Path(unquote(parsed.path))
    if parsed.scheme:
        raise InvalidInput(f"SHIPYARD_CATALOG {uri!r}: the scheduler needs a SQLite catalog")
    return Path(uri)


class JobStore:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or catalog_path()
        ensure_catalog_file(self.path)
        with self._db() as db:
            db.executescript(_SCHEMA)
            columns = {row["name"] for row in db.execute("PRAGMA table_info(scheduler_jobs)")}
            if "condition" not in columns:  # a queue written before jobs had conditions
                db.execute("ALTER TABLE scheduler_jobs ADD COLUMN condition TEXT")

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=30)
        db.row_factory = sqlite3.Row
        try:
            with db:
                yield db
        finally:
            db.close()

    def submit(self, job: Job, command: list[str]) -> str:
        if not command:
            raise InvalidInput("job submit: a command is required after --")
        job.id = job.id or uuid.uuid4().hex[:12]
        job.submit_time = time.time()
        with self._db() as db:
            db.execute(
                "INSERT INTO scheduler_jobs (id, spec, command, state, submitted)"
                " VALUES (?, ?, ?, 'queued', ?)",
                (job.id, json.dumps(asdict(job)), json.dumps(command), job.submit_time),
            )
        return job.id

    def get(self, job_id: str) -> dict[str, Any]:
        with self._db() as db:
            row = db.execute("SELECT * FROM scheduler_jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise NotFound(f"job {job_id!r} not found")
        return _row(row)

    def list(self, *states: str) -> list[dict[str, Any]]:
        query = "SELECT * FROM scheduler_jobs"
        if states:
            query += f" WHERE state IN ({', '.join('?' * len(states))})"
        with self._db() as db:
            return [_row(r) for r in db.execute(query + " ORDER BY submitted", states)]

    def cancel(self, job_id: str) -> str:
        """Queued jobs are cancelled at once; running ones are stopped by the service."""
        with self._db() as db:
            row = db.execute("SELECT state FROM scheduler_jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                raise NotFound(f"job {job_id!r} not found")
            new = {"queued": "cancelled", "running": "cancelling"}.get(row["state"], row["state"])
            db.execute(
                "UPDATE scheduler_jobs SET state = ?, finished = CASE WHEN ? = 'cancelled'"
                " THEN ? ELSE finished END WHERE id = ?",
                (new, new, time.time(), job_id),
            )
        return str(new)

    def update(self, job_id: str, **fields: Any) -> None:
        if "gpus" in fields:
            fields["gpus"] = json.dumps(fields["gpus"])
        for name in ("spec", "condition"):
            if name in fields:
                fields[name] = json.dumps(fields[name])
        assignments = ", ".join(f"{name} = ?" for name in fields)
        with self._db() as db:
            db.execute(
                f"UPDATE scheduler_jobs SET {assignments} WHERE id = ?", (*fields.values(), job_id)
            )


def _row(row: sqlite3.Row) -> dict[str, Any]:
    out = dict(row)
    out["spec"] = json.loads(out["spec"])
    out["command"] = json.loads(out["command"])
    out["gpus"] = json.loads(out["gpus"]) if out["gpus"] else None
    out["condition"] = json.loads(out["condition"]) if out["condition"] else None
    return out
