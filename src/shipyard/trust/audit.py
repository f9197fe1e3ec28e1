"""The access audit: one row per read of an artifact (who, what, when, from where, and the
verdict), in Shipyard's database beside the catalog (schema `audit`), on SQLite or PostgreSQL.

Rows are only ever inserted; `shipyard audit ls|show` reads them back.
"""

import os
import socket
import time
from dataclasses import dataclass
from typing import Any, Literal

from shipyard.db import SERIAL_KEY, Database, Schema, ensure
from shipyard.db.url import Dialect
from shipyard.provenance import current_user

Outcome = Literal["allowed", "warned", "refused"]
_MAX_TEXT = 1000  # what an event keeps of a free-text field (a ref, a client address, a reason)


def _v1(dialect: Dialect) -> str:
    return f"""
    CREATE TABLE IF NOT EXISTS audit_events (
        id {SERIAL_KEY[dialect]}, at DOUBLE PRECISION NOT NULL, action TEXT NOT NULL,
        artifact_id TEXT NOT NULL, kind TEXT NOT NULL, ref TEXT NOT NULL,
        user_name TEXT NOT NULL, uid INTEGER NOT NULL, service TEXT, host TEXT NOT NULL,
        pid INTEGER NOT NULL, client TEXT, outcome TEXT NOT NULL, signer TEXT,
        detail TEXT NOT NULL);
    CREATE INDEX IF NOT EXISTS audit_events_at ON audit_events (at);
    CREATE INDEX IF NOT EXISTS audit_events_artifact ON audit_events (artifact_id, at);
    CREATE INDEX IF NOT EXISTS audit_events_user ON audit_events (user_name, at)
    """


AUDIT = Schema("audit", (_v1,))


@dataclass(frozen=True)
class Reader:
    """Who reads, and from where: this process, plus the HTTP client it serves, if any."""

    service: str | None = None  # "replica", "peer", ...; None for a command line
    client: str | None = None  # the remote address of the request being served

    def user(self) -> str:
        try:
            return current_user()
        except (KeyError, OSError):  # no passwd entry for this uid in a container
            return f"uid-{os.getuid()}"


@dataclass(frozen=True)
class Event:
    id: int
    at: float
    action: str
    artifact_id: str
    kind: str
    ref: str
    user_name: str
    uid: int
    service: str | None
    host: str
    pid: int
    client: str | None
    outcome: str
    signer: str | None
    detail: str


def record(
    db: Database,
    *,
    action: str,
    artifact_id: str,
    kind: str,
    ref: str,
    reader: Reader,
    outcome: Outcome,
    signer: str | None = None,
    detail: str = "",
) -> None:
    ensure(db, AUDIT)
    db.run(
        "INSERT INTO audit_events (at, action, artifact_id, kind, ref, user_name, uid, service, "
        "host, pid, client, outcome, signer, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
        "?, ?)",
        (
            time.time(),
            action,
            artifact_id,
            kind,
            ref[:_MAX_TEXT],
            reader.user(),
            os.getuid(),
            reader.service,
            socket.gethostname(),
            os.getpid(),
            None if reader.client is None else reader.client[:_MAX_TEXT],
            outcome,
            signer,
            detail[:_MAX_TEXT],
        ),
    )


def query(
    db: Database,
    *,
    user: str | None = None,
    artifact: str | None = None,
    action: str | None = None,
    outcome: str | None = None,
    since: float | None = None,
    limit: int = 100,
) -> list[Event]:
    """The latest `limit` events that match every filter given, oldest first. `artifact` matches
    an id prefix."""
    ensure(db, AUDIT)
    where: list[str] = []
    params: list[Any] = []
    for column, value in (("user_name", user), ("action", action), ("outcome", outcome)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    if artifact is not None:
        where.append("substr(artifact_id, 1, ?) = ?")
        params += [len(artifact), artifact.lower()]
    if since is not None:
        where.append("at >= ?")
        params.append(since)
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    rows = db.rows(f"SELECT * FROM audit_events{clause} ORDER BY id DESC LIMIT ?", (*params, limit))
    return [Event(*row) for row in reversed(rows)]


def get_event(db: Database, event_id: int) -> Event | None:
    ensure(db, AUDIT)
    rows = db.rows("SELECT * FROM audit_events WHERE id = ?", (event_id,))
    return Event(*rows[0]) if rows else None
