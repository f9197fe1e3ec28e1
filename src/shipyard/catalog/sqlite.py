"""The embedded catalog: one SQLite file in WAL mode, safe for many processes on one host."""

import json
import sqlite3
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from shipyard.catalog.base import (
    AliasEvent,
    ArtifactRecord,
    LineageEdge,
    RunRecord,
    RunStatus,
)
from shipyard.errors import Conflict, InvalidInput, NotFound
from shipyard.hashing import canonical_json, sha256_hex

_SCHEMA = resources.files("shipyard.catalog").joinpath("schema.sql").read_text()
_BUSY_TIMEOUT_MS = 30_000


class SQLiteCatalog:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Autocommit mode: every write below opens its own explicit transaction.
        self.db = sqlite3.connect(self.path, isolation_level=None, timeout=_BUSY_TIMEOUT_MS / 1000)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("PRAGMA foreign_keys=ON")
        with self._write():
            self._create_schema()

    def _create_schema(self) -> None:
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                self.db.execute(statement)

    @contextmanager
    def _write(self) -> Iterator[None]:
        # BEGIN IMMEDIATE takes the write lock up front, so read-then-write sequences such as an
        # alias compare-and-swap cannot interleave with another writer.
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def close(self) -> None:
        self.db.close()

    # Artifacts

    def add_artifact(self, record: ArtifactRecord) -> None:
        with self._write():
            self.db.execute(
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
        row = self.db.execute("SELECT * FROM artifacts WHERE id = ?", (artifact_id,)).fetchone()
        return _artifact(row) if row else None

    def list_artifacts(self, kind: str | None = None) -> list[ArtifactRecord]:
        query = "SELECT * FROM artifacts"
        params: tuple[Any, ...] = ()
        if kind:
            query, params = query + " WHERE kind = ?", (kind,)
        return [_artifact(r) for r in self.db.execute(query + " ORDER BY created_at", params)]

    def find_by_prefix(self, prefix: str) -> list[str]:
        if not prefix or not all(c in "0123456789abcdef" for c in prefix):
            return []
        rows = self.db.execute(
            "SELECT id FROM artifacts WHERE id >= ? AND id < ? ORDER BY id LIMIT 5",
            (prefix, prefix + "g"),
        )
        return [r[0] for r in rows]

    # Aliases

    def get_alias(self, name: str) -> str | None:
        row = self.db.execute("SELECT artifact_id FROM aliases WHERE name = ?", (name,)).fetchone()
        return row[0] if row else None

    def list_aliases(self) -> dict[str, str]:
        return dict(self.db.execute("SELECT name, artifact_id FROM aliases ORDER BY name"))

    def set_alias(self, name: str, new_id: str, expect: str | None, by: str) -> None:
        _check_alias_name(name)
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
            self.db.execute(
                "INSERT INTO aliases VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE "
                "SET artifact_id = excluded.artifact_id, updated_at = excluded.updated_at",
                (name, new_id, now),
            )
            self.db.execute(
                "INSERT INTO alias_history (name, old_id, new_id, at, by_whom) VALUES (?,?,?,?,?)",
                (name, current, new_id, now, by),
            )

    def alias_history(self, name: str) -> list[AliasEvent]:
        rows = self.db.execute(
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
            self.db.execute(
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
                self.db.execute("INSERT OR IGNORE INTO edges VALUES (?, ?)", (artifact_id, run_id))
        return run_id

    def add_run_output(self, run_id: str, artifact_id: str) -> None:
        with self._write():
            self.db.execute("INSERT OR IGNORE INTO edges VALUES (?, ?)", (run_id, artifact_id))

    def finish_run(self, run_id: str, status: RunStatus) -> None:
        with self._write():
            cursor = self.db.execute(
                "UPDATE runs SET status = ?, ended_at = ? WHERE id = ?",
                (status, time.time(), run_id),
            )
            if cursor.rowcount == 0:
                raise NotFound(f"run {run_id} does not exist")

    def get_run(self, run_id: str) -> RunRecord | None:
        row = self.db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            return None
        inputs = [
            r[0] for r in self.db.execute("SELECT parent FROM edges WHERE child = ?", (run_id,))
        ]
        outputs = [
            r[0] for r in self.db.execute("SELECT child FROM edges WHERE parent = ?", (run_id,))
        ]
        run_id, kind, status, started, ended, config_hash, code_version, user, config = row
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
        return [LineageEdge(*row) for row in self.db.execute(query, (node_id,))]


def _artifact(row: tuple[Any, ...]) -> ArtifactRecord:
    artifact_id, kind, size, file_count, created_at, run_id, metadata = row
    return ArtifactRecord(
        artifact_id, kind, size, file_count, created_at, run_id, json.loads(metadata)
    )


def _check_alias_name(name: str) -> None:
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:")
    if not name or len(name) > 200 or not set(name) <= allowed or name[0] in "./":
        raise InvalidInput(
            f"alias {name!r}: use 1–200 letters, digits or '-_./:' not starting with '.' or '/'"
        )
    if len(name) == 64 and all(c in "0123456789abcdef" for c in name):
        raise InvalidInput(f"alias {name!r} looks like an artifact id; choose another name")
