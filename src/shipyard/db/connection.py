"""One connection to Shipyard's database, SQLite or PostgreSQL, behind one small surface.

Callers write SQL once, with `?` or `:name` placeholders (parameters as a sequence or a mapping),
in the subset both engines share; the connection turns them into psycopg's `%s` and `%(name)s`
(so Shipyard's SQL never holds a literal `?`, `%` or `:word`). Outside
`transaction()` every statement commits on its own. Every driver error becomes a `StorageError`
that names the database; a lost PostgreSQL connection becomes `DatabaseUnavailable`, and the
next statement connects afresh, so a caller that retries rides out a server restart.
A `Database` is one connection: use one per thread.
"""

import re
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from shipyard.db.sqlitefile import ensure_file
from shipyard.db.url import DatabaseURL, Dialect, parse_url
from shipyard.errors import StorageError

if TYPE_CHECKING:
    import psycopg

Params = Sequence[Any] | Mapping[str, Any]
_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")  # `:name`, not a `::type` cast
_BUSY_TIMEOUT_S = 30.0
_CONNECT_TIMEOUT_S = 5


class DatabaseUnavailable(StorageError):
    """The database server cannot be reached now (down, restarting, network): worth a retry."""


class Database:
    def __init__(self, url: DatabaseURL | str, label: str = "database") -> None:
        self.url = parse_url(url) if isinstance(url, str) else url
        self.dialect: Dialect = self.url.dialect
        self.label = label  # how messages name it: "catalog /path/catalog.db"
        self._sqlite: sqlite3.Connection | None = None
        self._pg: psycopg.Connection[tuple[Any, ...]] | None = None
        self._listening: set[str] = set()
        self._sql: dict[str, str] = {}
        if self.dialect == "sqlite":
            self._open_sqlite()
        else:
            self._connect_pg()

    def __str__(self) -> str:
        return f"{self.label} {self.url.shown}"

    # Connecting

    def _open_sqlite(self) -> None:
        ensure_file(self.url.path, self.label)
        try:
            # Autocommit mode: `transaction()` opens each explicit transaction itself. One thread
            # uses a connection at a time, but the last reference to a thread's connection may
            # be dropped (and the connection closed) from another, e.g. a web server's pool.
            self._sqlite = sqlite3.connect(
                self.url.path,
                isolation_level=None,
                timeout=_BUSY_TIMEOUT_S,
                check_same_thread=False,
            )
        except sqlite3.Error as exc:
            raise self._error(exc) from None
        self.run("PRAGMA journal_mode=WAL")
        self.run("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: a killed process loses nothing
        self.run("PRAGMA foreign_keys=ON")

    def _connect_pg(self) -> "psycopg.Connection[tuple[Any, ...]]":
        if self._pg is not None and not self._pg.closed:
            return self._pg
        try:
            import psycopg
        except ImportError:
            raise StorageError(
                f"{self}: PostgreSQL needs psycopg: pip install 'shipyard[postgres]'"
            ) from None
        try:
            self._pg = psycopg.connect(
                self.url.target,
                autocommit=True,
                connect_timeout=_CONNECT_TIMEOUT_S,
                application_name="shipyard",
            )
        except psycopg.Error as exc:
            raise DatabaseUnavailable(f"cannot connect to {self}: {self._said(exc)}") from None
        self._listening.clear()
        return self._pg

    def close(self) -> None:
        if self._sqlite is not None:
            self._sqlite.close()
        if self._pg is not None:
            self._pg.close()

    # Statements

    def rows(self, sql: str, params: Params = ()) -> list[tuple[Any, ...]]:
        """Run one statement and return every row it produced."""
        if self._sqlite is not None:
            try:
                return self._sqlite.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise self._error(exc) from None
        cursor = self._pg_execute(sql, params)
        return cursor.fetchall() if cursor.description else []

    def records(self, sql: str, params: Params = ()) -> list[dict[str, Any]]:
        """`rows`, each as a dict keyed by column name."""
        if self._sqlite is not None:
            try:
                cursor = self._sqlite.execute(sql, params)
                return _as_dicts(cursor.description, cursor.fetchall())
            except sqlite3.Error as exc:
                raise self._error(exc) from None
        pg = self._pg_execute(sql, params)
        return _as_dicts(pg.description, pg.fetchall() if pg.description else [])

    def run(self, sql: str, params: Params = ()) -> int:
        """Run one statement; return how many rows it changed."""
        if self._sqlite is not None:
            try:
                return self._sqlite.execute(sql, params).rowcount
            except sqlite3.Error as exc:
                raise self._error(exc) from None
        return self._pg_execute(sql, params).rowcount

    def run_many(self, sql: str, rows: Iterable[Params]) -> None:
        if self._sqlite is not None:
            try:
                self._sqlite.executemany(sql, rows)
            except sqlite3.Error as exc:
                raise self._error(exc) from None
            return
        import psycopg

        conn = self._connect_pg()
        try:
            conn.cursor().executemany(self._pg_sql(sql), rows)
        except psycopg.Error as exc:
            raise self._error(exc) from None

    def _pg_execute(self, sql: str, params: Params) -> "psycopg.Cursor[tuple[Any, ...]]":
        import psycopg

        conn = self._connect_pg()
        try:
            return conn.execute(self._pg_sql(sql), params)
        except psycopg.Error as exc:
            raise self._error(exc) from None

    def _pg_sql(self, sql: str) -> str:
        converted = self._sql.get(sql)
        if converted is None:
            escaped = sql.replace("%", "%%").replace("?", "%s")
            converted = self._sql[sql] = _NAMED.sub(r"%(\1)s", escaped)
        return converted

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One transaction around the block. On SQLite it takes the write lock up front
        (`BEGIN IMMEDIATE`), so a read-then-write inside cannot interleave with another writer."""
        self.run("BEGIN IMMEDIATE" if self.dialect == "sqlite" else "BEGIN")
        try:
            yield
        except BaseException:
            self._rollback()
            raise
        self.run("COMMIT")

    def _rollback(self) -> None:
        if self._sqlite is not None:
            if self._sqlite.in_transaction:
                self._sqlite.execute("ROLLBACK")
        elif self._pg is not None and not self._pg.closed:
            import psycopg

            try:
                self._pg.execute("ROLLBACK")
            except psycopg.Error:
                self._pg.close()  # the next statement connects afresh

    def has_table(self, name: str) -> bool:
        if self.dialect == "sqlite":
            found = self.rows(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
            )
        else:
            found = self.rows("SELECT 1 WHERE to_regclass(?) IS NOT NULL", (name,))
        return bool(found)

    # Waking waiters (PostgreSQL LISTEN/NOTIFY; SQLite has no such thing, so callers poll)

    def notify(self, channel: str, payload: str) -> None:
        """Tell listeners on `channel`; inside a transaction it is sent at commit."""
        if self.dialect == "postgresql":
            self.rows("SELECT pg_notify(?, ?)", (channel, payload))

    def wait(self, channel: str, timeout: float) -> list[str]:
        """Payloads notified on `channel` within `timeout` seconds (SQLite: sleeps, returns [])."""
        if self.dialect == "sqlite":
            time.sleep(timeout)
            return []
        import psycopg

        conn = self._connect_pg()
        try:
            if channel not in self._listening:
                conn.execute(f'LISTEN "{channel}"')
                self._listening.add(channel)
            return [n.payload for n in conn.notifies(timeout=timeout, stop_after=1)]
        except psycopg.Error as exc:
            raise self._error(exc) from None

    # Errors

    def _said(self, exc: Exception) -> str:
        """The driver's first line about `exc`, with no password of the URL in it."""
        return self.url.scrub(_first_line(exc))

    def _error(self, exc: Exception) -> StorageError:
        if isinstance(exc, sqlite3.Error):
            return StorageError(
                f"{self}: {exc} (is it a Shipyard {self.label}, and intact?)"
                if "not a database" in str(exc) or "malformed" in str(exc)
                else f"{self}: {exc}"
            )
        import psycopg

        if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError) and (
            self._pg is None or self._pg.closed or self._pg.broken
        ):
            if self._pg is not None:
                self._pg.close()
            return DatabaseUnavailable(f"{self} is unreachable: {self._said(exc)}")
        return StorageError(f"{self}: {self._said(exc)}")


def _as_dicts(description: Any, rows: list[Any]) -> list[dict[str, Any]]:
    names = [column[0] for column in description or ()]
    return [dict(zip(names, row, strict=True)) for row in rows]


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
