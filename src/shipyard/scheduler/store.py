"""The live queue, in the scheduler's own table of Shipyard's database (`shipyard.db`).

The service, its HTTP threads and the CLI all read and write it; each thread that uses a
`JobStore` gets its own connection to the same database. A job's row holds its spec (JSON), its
command, its state, what the backend reported, and its condition (why it waits, or that it was
admitted: `{"reason", "message", "since"}` as JSON).
"""

import json
import threading
import time
import uuid
from dataclasses import asdict
from typing import Any

from shipyard.db import Database, Dialect, Schema, ensure, open_database
from shipyard.errors import InvalidInput, NotFound
from shipyard.scheduler.model import Job

STATES = ("queued", "running", "cancelling", "done", "failed", "cancelled")


def _v1(dialect: Dialect) -> str:
    # `IF NOT EXISTS`: a queue made before versioning already has this table (see `_adopt`).
    return """
CREATE TABLE IF NOT EXISTS scheduler_jobs (
    id        TEXT PRIMARY KEY,
    spec      TEXT NOT NULL,
    command   TEXT NOT NULL,
    state     TEXT NOT NULL,
    submitted DOUBLE PRECISION NOT NULL,
    started   DOUBLE PRECISION,
    finished  DOUBLE PRECISION,
    gpus      TEXT,
    exit_code INTEGER,
    message   TEXT NOT NULL DEFAULT '',
    condition TEXT
);
CREATE INDEX IF NOT EXISTS scheduler_jobs_state ON scheduler_jobs (state)
"""


def _adopt(db: Database) -> None:
    """A SQLite queue written before jobs had conditions lacks that column."""
    if db.dialect == "sqlite" and db.has_table("scheduler_jobs"):
        columns = {r[0] for r in db.rows("SELECT name FROM pragma_table_info('scheduler_jobs')")}
        if "condition" not in columns:
            db.run("ALTER TABLE scheduler_jobs ADD COLUMN condition TEXT")


SCHEDULER = Schema("scheduler", (_v1,), adopt=_adopt)


class _Closer:
    """Closes a thread's own connection when that thread ends and its locals go."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def __del__(self) -> None:
        self.db.close()


class JobStore:
    def __init__(self, db: Database | None = None) -> None:
        """`db` serves the thread that made the store; other threads open their own."""
        self.db = db or open_database()
        ensure(self.db, SCHEDULER)
        self._local = threading.local()
        self._local.db = self.db

    def close(self) -> None:
        self.db.close()

    def _db(self) -> Database:
        mine: Database | None = getattr(self._local, "db", None)
        if mine is None:
            mine = self._local.db = Database(self.db.url, self.db.label)
            self._local.closer = _Closer(mine)
        return mine

    def submit(self, job: Job, command: list[str]) -> str:
        if not command:
            raise InvalidInput("job submit: a command is required after --")
        job.id = job.id or uuid.uuid4().hex[:12]
        job.submit_time = time.time()
        self._db().run(
            "INSERT INTO scheduler_jobs (id, spec, command, state, submitted)"
            " VALUES (?, ?, ?, 'queued', ?)",
            (job.id, json.dumps(asdict(job)), json.dumps(command), job.submit_time),
        )
        return job.id

    def get(self, job_id: str) -> dict[str, Any]:
        rows = self._db().records("SELECT * FROM scheduler_jobs WHERE id = ?", (job_id,))
        if not rows:
            raise NotFound(f"job {job_id!r} not found")
        return _decoded(rows[0])

    def list(self, *states: str) -> list[dict[str, Any]]:
        query = "SELECT * FROM scheduler_jobs"
        if states:
            query += f" WHERE state IN ({', '.join('?' * len(states))})"
        rows = self._db().records(query + " ORDER BY submitted, id", states)
        return [_decoded(r) for r in rows]

    def cancel(self, job_id: str) -> str:
        """Queued jobs are cancelled at once; running ones are stopped by the service.

        One statement reads and writes the state, so a job the service starts meanwhile is
        never marked cancelled while it runs."""
        rows = self._db().rows(
            "UPDATE scheduler_jobs SET"
            " state = CASE state WHEN 'queued' THEN 'cancelled'"
            " WHEN 'running' THEN 'cancelling' ELSE state END,"
            " finished = CASE state WHEN 'queued' THEN ? ELSE finished END"
            " WHERE id = ? RETURNING state",
            (time.time(), job_id),
        )
        if not rows:
            raise NotFound(f"job {job_id!r} not found")
        return str(rows[0][0])

    def update(self, job_id: str, **fields: Any) -> None:
        for name in ("gpus", "spec", "condition"):
            if name in fields:
                fields[name] = json.dumps(fields[name])
        assignments = ", ".join(f"{name} = ?" for name in fields)
        self._db().run(
            f"UPDATE scheduler_jobs SET {assignments} WHERE id = ?", (*fields.values(), job_id)
        )


def _decoded(row: dict[str, Any]) -> dict[str, Any]:
    for name in ("spec", "command"):
        row[name] = json.loads(row[name])
    for name in ("gpus", "condition"):
        row[name] = json.loads(row[name]) if row[name] else None
    return row
