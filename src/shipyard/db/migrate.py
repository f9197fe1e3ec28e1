"""Versioned schemas, one per subsystem, recorded in the database they shape.

A subsystem's `Schema` is its ordered list of steps; step N takes its tables from version N-1 to
N. The table `shipyard_schema` holds each subsystem's version. Opening a subsystem brings its
tables up to date (`ensure`); `shipyard db upgrade` does it for all of them at once. A database
whose version is newer than this code's steps is refused by name: old code must not write tables
whose meaning it does not know.
"""

import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from shipyard.db.connection import Database
from shipyard.db.url import Dialect
from shipyard.errors import StorageError

Step = Callable[[Dialect], str]  # the SQL of one step (statements separated by ';') per dialect
VERSION_TABLE = "shipyard_schema"


@dataclass(frozen=True)
class Schema:
    subsystem: str
    steps: tuple[Step, ...]

    @property
    def latest(self) -> int:
        return len(self.steps)


class SchemaTooNew(StorageError):
    """The database was upgraded by a newer Shipyard than this one."""


def version(db: Database, schema: Schema) -> int:
    """The version of `schema` in `db` (0: none of its steps applied)."""
    if not db.has_table(VERSION_TABLE):
        return 0
    found = db.rows(f"SELECT version FROM {VERSION_TABLE} WHERE subsystem = ?", (schema.subsystem,))
    return int(found[0][0]) if found else 0


def ensure(db: Database, schema: Schema) -> int:
    """Bring `schema` in `db` to this code's latest version; return the version it was at."""
    found = version(db, schema)  # the common case, up to date, takes no lock
    _refuse_newer(db, schema, found)
    if found == schema.latest:
        return found
    with db.transaction():
        if db.dialect == "postgresql":
            # Concurrent openers wait here, then find the work done.
            db.rows("SELECT pg_advisory_xact_lock(?)", (zlib.crc32(VERSION_TABLE.encode()),))
        db.run(
            f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (subsystem TEXT PRIMARY KEY, "
            "version INTEGER NOT NULL, upgraded_at DOUBLE PRECISION NOT NULL)"
        )
        found = version(db, schema)
        _refuse_newer(db, schema, found)
        for step in schema.steps[found:]:
            for statement in step(db.dialect).split(";"):
                if statement.strip():
                    db.run(statement)
        db.run(
            f"INSERT INTO {VERSION_TABLE} VALUES (?, ?, ?) ON CONFLICT (subsystem) DO UPDATE "
            "SET version = excluded.version, upgraded_at = excluded.upgraded_at",
            (schema.subsystem, schema.latest, time.time()),
        )
    return found


def upgrade(db: Database, schemas: Sequence[Schema]) -> list[tuple[str, int, int]]:
    """Ensure every schema; return (subsystem, version before, version now) for each."""
    return [(s.subsystem, ensure(db, s), s.latest) for s in schemas]


def _refuse_newer(db: Database, schema: Schema, found: int) -> None:
    if found > schema.latest:
        raise SchemaTooNew(
            f"{db} holds the {schema.subsystem} schema at version {found}, newer than this "
            f"Shipyard understands (up to {schema.latest}): upgrade Shipyard, or point "
            "SHIPYARD_DB at another database"
        )
