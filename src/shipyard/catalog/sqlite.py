"""The embedded catalog: one SQLite file in WAL mode, safe for many processes on one host.

Only a missing file means a fresh catalog. A new one is built beside its final name and linked
into place, so no process ever sees a half-made catalog; an existing file that is empty or not a
database is refused by name (`StorageError`), never replaced: it held every alias and lineage
record.
"""

import json
import os
import sqlite3
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from shipyard.catalog.base import (
    AliasEvent,
    ArtifactRecord,
    LineageEdge,
    RunRecord,
    RunStatus,
    check_alias_name,
)
from shipyard.errors import Conflict, NotFound, StorageError
from shipyard.hashing import canonical_json, sha256_hex

_SCHEMA = resources.files("shipyard.catalog").joinpath("schema.sql").read_text()
_BUSY_TIMEOUT_MS = 30_000


class SQLiteCatalog:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        ensure_catalog_file(self.path)
        try:
            # Autocommit mode: every write below opens its own explicit transaction.
            self.db = sqlite3.connect(
                self.path, isolation_level=None, timeout=_BUSY_TIMEOUT_MS / 1000
            )
        except sqlite3.Error as exc:
            raise self._broken(exc) from None
        self._execute("PRAGMA journal_mode=WAL")
        self._execute("PRAGMA synchronous=NORMAL")
        self._execute("PRAGMA foreign_keys=ON")
        with self._write():
            _create_schema(self._execute)

    def _broken(self, exc: sqlite3.Error) -> StorageError:
        return StorageError(f"catalog {self.path}: {exc} (is it a Shipyard catalog, and intact?)")

    def _execute(self, sql: str, params: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        try:
            return self.db.execute(sql, params)
        except sqlite3.Error as exc:
            raise self._broken(exc) from None

    def _rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        try:
            return self.db.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise self._broken(exc) from None

    @contextmanager
    def _write(self) -> Iterator[None]:
        # BEGIN IMMEDIATE takes the write lock up front, so read-then-write sequences such as an
        # alias compare-and-swap cannot interleave with another writer.
        self._execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._execute("ROLLBACK")
            raise
        self._execute("COMMIT")

    def close(self) -> None:
        self.db.close()

    # Artifacts

    def add_artifact(self, record: ArtifactRecord) -> None:
        with self._write():
            self._execute(
                "INSERT OR IGNORE INTO artifacts VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    record.id,
                    record.kind,
                    record.size,
                    record.file_count,
                    record.created_at,
                    record.run_id,
                    json.dumps(record.metadata, sort_keys=True),
                ),
            )

    def get_artifact(self, artifact_id: str) -> ArtifactRecord | None:
        rows = self._rows("SELECT * FROM artifacts WHERE id = ?", (artifact_id,))
        return _artifact(rows[0]) if rows else None

    def list_artifacts(self, kind: str | None = None) -> list[ArtifactRecord]:
        query = "SELECT * FROM artifacts"
        params: tuple[Any, ...] = ()
        if kind:
            query, params = query + " WHERE kind = ?", (kind,)
        return [_artifact(r) for r in self._rows(query + " ORDER BY created_at", params)]

    def find_by_prefix(self, prefix: str) -> list[str]:
        if not prefix or not all(c in "0123456789abcdef" for c in prefix):
            return []
        rows = self._rows(
            "SELECT id FROM artifacts WHERE id >= ? AND id < ? ORDER BY id LIMIT 5",
            (prefix, prefix + "g"),
        )
        return [r[0] for r in rows]

    # Aliases

    def get_alias(self, name: str) -> str | None:
        rows = self._rows("SELECT artifact_id FROM aliases WHERE name = ?", (name,))
        return str(rows[0][0]) if rows else None

    def list_aliases(self) -> dict[str, str]:
        return dict(self._rows("SELECT name, artifact_id FROM aliases ORDER BY name"))

    def set_alias(self, name: str, new_id: str, expect: str | None, by: str) -> None:
        check_alias_name(name)
        now = time.time()
        with self._write():
            if self.get_artifact(new_id) is None:
                raise NotFound(f"cannot point alias {name!r} at unknown artifact {new_id}")
            current = self.get_alias(name)
            if current != expect:
                raise Conflict(
                    f"alias {name!r} points at {current or 'nothing'}, "
                    f"not the expected {expect or 'nothing'}"
                )
            if current == new_id:
                return  # already there: not a move, so no history entry
            self._execute(
                "INSERT INTO aliases VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE "
                "SET artifact_id = excluded.artifact_id, updated_at = excluded.updated_at",
                (name, new_id, now),
            )
            self._execute(
                "INSERT INTO alias_history (name, old_id, new_id, at, by_whom) VALUES (?,?,?,?,?)",
                (name, current, new_id, now, by),
            )

    def alias_history(self, name: str) -> list[AliasEvent]:
        rows = self._rows(
            "SELECT name, old_id, new_id, at, by_whom FROM alias_history WHERE name = ? "
            "ORDER BY seq",
            (name,),
        )
        return [AliasEvent(*r) for r in rows]

    # Runs and lineage

    def start_run(
        self,
        kind: str,
        config: dict[str, Any],
        code_version: str,
        user: str,
        inputs: list[str],
    ) -> str:
        run_id = f"run-{uuid.uuid4().hex[:16]}"
        config_bytes = canonical_json(config)
        with self._write():
            self._execute(
                "INSERT INTO runs VALUES (?, ?, 'running', ?, NULL, ?, ?, ?, ?)",
                (
                    run_id,
                    kind,
                    time.time(),
                    sha256_hex(config_bytes),
                    code_version,
                    user,
                    config_bytes.decode(),
                ),
            )
            for artifact_id in inputs:
                if self.get_artifact(artifact_id) is None:
                    raise NotFound(f"run input {artifact_id} is not a known artifact")
                self._execute("INSERT OR IGNORE INTO edges VALUES (?, ?)", (artifact_id, run_id))
        return run_id

    def add_run_output(self, run_id: str, artifact_id: str) -> None:
        with self._write():
            self._execute("INSERT OR IGNORE INTO edges VALUES (?, ?)", (run_id, artifact_id))

    def finish_run(self, run_id: str, status: RunStatus) -> None:
        with self._write():
            cursor = self._execute(
                "UPDATE runs SET status = ?, ended_at = ? WHERE id = ?",
                (status, time.time(), run_id),
            )
            if cursor.rowcount == 0:
                raise NotFound(f"run {run_id} does not exist")

    def get_run(self, run_id: str) -> RunRecord | None:
        found = self._rows("SELECT * FROM runs WHERE id = ?", (run_id,))
        if not found:
            return None
        inputs = [r[0] for r in self._rows("SELECT parent FROM edges WHERE child = ?", (run_id,))]
        outputs = [r[0] for r in self._rows("SELECT child FROM edges WHERE parent = ?", (run_id,))]
        run_id, kind, status, started, ended, config_hash, code_version, user, config = found[0]
        return RunRecord(
            run_id,
            kind,
            status,
            started,
            ended,
            config_hash,
            code_version,
            user,
            json.loads(config),
            tuple(sorted(inputs)),
            tuple(sorted(outputs)),
        )

    def lineage(self, node_id: str, direction: Literal["up", "down"]) -> list[LineageEdge]:
        # Walk the edge table breadth-first in SQL; UNION (not UNION ALL) stops at cycles.
        near, far = ("child", "parent") if direction == "up" else ("parent", "child")
        query = f"""
            WITH RECURSIVE walk(parent, child, depth) AS (
                SELECT parent, child, 1 FROM edges WHERE {near} = ?
                UNION
                SELECT e.parent, e.child, w.depth + 1
                FROM edges e JOIN walk w ON e.{near} = w.{far}
                WHERE w.depth < 1000
            )
            SELECT parent, child, MIN(depth) FROM walk GROUP BY parent, child ORDER BY 3, 1, 2
        """
        return [LineageEdge(*row) for row in self._rows(query, (node_id,))]


def _artifact(row: tuple[Any, ...]) -> ArtifactRecord:
    artifact_id, kind, size, file_count, created_at, run_id, metadata = row
    return ArtifactRecord(
        artifact_id, kind, size, file_count, created_at, run_id, json.loads(metadata)
    )


def _create_schema(execute: Any) -> None:
    for statement in _SCHEMA.split(";"):
        if statement.strip():
            execute(statement)


def ensure_catalog_file(path: Path) -> None:
    """Make a fresh catalog at `path` if nothing is there; refuse an empty file. Everything that
    opens the catalog file calls this first, so none sees another's half-made file."""
    try:
        if path.stat().st_size == 0:
            raise StorageError(
                f"catalog {path} is an empty file, not a catalog: refusing to start a fresh one "
                "over it. Restore it from a backup, or move it aside to start afresh"
            )
        return
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise StorageError(f"cannot open catalog {path}: {exc.strerror}") from None
    fresh = path.with_name(f".{path.name}.new-{uuid.uuid4().hex[:12]}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(fresh, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            _create_schema(db.execute)
        finally:
            db.close()
        with suppress(FileExistsError):  # link never replaces: a catalog made first wins
            os.link(fresh, path)
    except (OSError, sqlite3.Error) as exc:
        raise StorageError(f"cannot create catalog {path}: {exc}") from None
    finally:
        fresh.unlink(missing_ok=True)
