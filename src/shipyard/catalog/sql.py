"""The catalog in SQL that SQLite and PostgreSQL both run, over a `shipyard.db.Database`.

Alias moves are one conditional statement each (insert-if-absent, or update-where-still), so a
compare-and-swap holds on PostgreSQL's row locks as on SQLite's database lock.
"""

import json
import time
import uuid
from typing import Any, Literal

from shipyard.catalog.base import (
    AliasEvent,
    ArtifactRecord,
    LineageEdge,
    RunRecord,
    RunStatus,
    check_alias_name,
)
from shipyard.catalog.schema import CATALOG
from shipyard.db import Database, ensure
from shipyard.errors import Conflict, NotFound
from shipyard.hashing import canonical_json, sha256_hex

# Nodes per query of a lineage walk: few enough that a capped walk stops soon after its cap.
_FRONTIER_CHUNK = 32


class SQLCatalog:
    def __init__(self, db: Database) -> None:
        self.db = db
        ensure(db, CATALOG)

    def close(self) -> None:
        self.db.close()

    # Artifacts

    def add_artifact(self, record: ArtifactRecord) -> None:
        self.db.run(
            "INSERT INTO artifacts VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
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
        rows = self.db.rows("SELECT * FROM artifacts WHERE id = ?", (artifact_id,))
        return _artifact(rows[0]) if rows else None

    def list_artifacts(self, kind: str | None = None) -> list[ArtifactRecord]:
        query = "SELECT * FROM artifacts"
        params: tuple[Any, ...] = ()
        if kind:
            query, params = query + " WHERE kind = ?", (kind,)
        return [_artifact(r) for r in self.db.rows(query + " ORDER BY created_at, id", params)]

    def find_by_prefix(self, prefix: str) -> list[str]:
        if not prefix or not all(c in "0123456789abcdef" for c in prefix):
            return []
        rows = self.db.rows(
            "SELECT id FROM artifacts WHERE id >= ? AND id < ? ORDER BY id LIMIT 5",
            (prefix, prefix + "g"),
        )
        return [r[0] for r in rows]

    # Aliases

    def get_alias(self, name: str) -> str | None:
        rows = self.db.rows("SELECT artifact_id FROM aliases WHERE name = ?", (name,))
        return str(rows[0][0]) if rows else None

    def list_aliases(self) -> dict[str, str]:
        return {
            r[0]: r[1] for r in self.db.rows("SELECT name, artifact_id FROM aliases ORDER BY name")
        }

    def set_alias(self, name: str, new_id: str, expect: str | None, by: str) -> None:
        check_alias_name(name)
        now = time.time()
        with self.db.transaction():
            if self.get_artifact(new_id) is None:
                raise NotFound(f"cannot point alias {name!r} at unknown artifact {new_id}")
            if expect == new_id:
                moved = 1 if self.get_alias(name) == expect else 0  # already there: no history
            elif expect is None:
                moved = self.db.run(
                    "INSERT INTO aliases VALUES (?, ?, ?) ON CONFLICT (name) DO NOTHING",
                    (name, new_id, now),
                )
            else:
                moved = self.db.run(
                    "UPDATE aliases SET artifact_id = ?, updated_at = ? "
                    "WHERE name = ? AND artifact_id = ?",
                    (new_id, now, name, expect),
                )
            if not moved:
                current = self.get_alias(name)
                raise Conflict(
                    f"alias {name!r} points at {current or 'nothing'}, "
                    f"not the expected {expect or 'nothing'}"
                )
            if expect != new_id:
                self.db.run(
                    "INSERT INTO alias_history (name, old_id, new_id, at, by_whom) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (name, expect, new_id, now, by),
                )

    def alias_history(self, name: str) -> list[AliasEvent]:
        rows = self.db.rows(
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
        with self.db.transaction():
            self.db.run(
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
                self._edge(artifact_id, run_id)
        return run_id

    def add_run_output(self, run_id: str, artifact_id: str) -> None:
        self._edge(run_id, artifact_id)

    def _edge(self, parent: str, child: str) -> None:
        self.db.run("INSERT INTO edges VALUES (?, ?) ON CONFLICT DO NOTHING", (parent, child))

    def finish_run(self, run_id: str, status: RunStatus) -> None:
        changed = self.db.run(
            "UPDATE runs SET status = ?, ended_at = ? WHERE id = ?",
            (status, time.time(), run_id),
        )
        if changed == 0:
            raise NotFound(f"run {run_id} does not exist")

    def get_run(self, run_id: str) -> RunRecord | None:
        found = self.db.rows("SELECT * FROM runs WHERE id = ?", (run_id,))
        if not found:
            return None
        inputs = [r[0] for r in self.db.rows("SELECT parent FROM edges WHERE child = ?", (run_id,))]
        outputs = [
            r[0] for r in self.db.rows("SELECT child FROM edges WHERE parent = ?", (run_id,))
        ]
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

    def lineage(
        self,
        node_id: str,
        direction: Literal["up", "down"],
        max_depth: int = 1000,
        max_nodes: int | None = None,
    ) -> list[LineageEdge]:
        # Breadth-first, one level at a time: each node is expanded once, at its least depth, so
        # each edge comes back once with its least depth and a cycle ends itself. A recursive
        # CTE cannot stop at a node count; this walk stops as soon as it knows more than
        # `max_nodes` nodes, because the far levels of a big graph are most of the work.
        near, far = ("child", "parent") if direction == "up" else ("parent", "child")
        seen, frontier, out = {node_id}, [node_id], []
        depth = 0
        while frontier and depth < max_depth:
            depth += 1
            level: list[tuple[str, str]] = []
            found: list[str] = []
            for start in range(0, len(frontier), _FRONTIER_CHUNK):
                chunk = frontier[start : start + _FRONTIER_CHUNK]
                marks = ", ".join("?" for _ in chunk)
                query = f"SELECT parent, child, {far} FROM edges WHERE {near} IN ({marks})"
                for parent, child, node in self.db.rows(query, tuple(chunk)):
                    level.append((parent, child))
                    if node not in seen:
                        seen.add(node)
                        found.append(node)
                if max_nodes is not None and len(seen) > max_nodes:
                    frontier = []
                    break
            else:
                frontier = sorted(found)
            out += [LineageEdge(parent, child, depth) for parent, child in sorted(level)]
        return out


def _artifact(row: tuple[Any, ...]) -> ArtifactRecord:
    artifact_id, kind, size, file_count, created_at, run_id, metadata = row
    return ArtifactRecord(
        artifact_id, kind, size, file_count, created_at, run_id, json.loads(metadata)
    )
