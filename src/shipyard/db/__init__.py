"""Shipyard's one database: SQLite by default, PostgreSQL for many hosts (`SHIPYARD_DB`).

Every stateful subsystem (the catalog, the queue, the scheduler, the trainer) keeps its tables
here, through a `Database` and its own versioned `Schema`.
"""

from shipyard.db.connection import Database, DatabaseUnavailable
from shipyard.db.migrate import SERIAL_KEY, Schema, SchemaTooNew, ensure, upgrade, version
from shipyard.db.url import DatabaseURL, Dialect, database_url, parse_url


def open_database(url: str | None = None, label: str = "database") -> Database:
    """A connection to `url` (default: the configured `SHIPYARD_DB`)."""
    return Database(url or database_url(), label)


__all__ = [
    "SERIAL_KEY",
    "Database",
    "DatabaseURL",
    "DatabaseUnavailable",
    "Dialect",
    "Schema",
    "SchemaTooNew",
    "database_url",
    "ensure",
    "open_database",
    "parse_url",
    "upgrade",
    "version",
]
