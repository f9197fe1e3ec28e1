"""What the console shows about artifacts: search, one artifact whole, and its lineage graph."""

import itertools
import json
import string
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any, Literal

from shipyard.catalog import ArtifactRecord, SQLCatalog
from shipyard.errors import InvalidInput
from shipyard.workspace import Workspace

MAX_DEPTH = 20
MAX_NODES = 400  # a graph bigger than this is cut; the reply says so
MAX_RESULTS = 200


def _aliases_by_target(ws: Workspace) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, target in ws.catalog.list_aliases().items():
        out.setdefault(target, []).append(name)
    return out


def _summary(record: ArtifactRecord, aliases: list[str]) -> dict[str, Any]:
    return {
        "id": record.id,
        "kind": record.kind,
        "size": record.size,
        "file_count": record.file_count,
        "created_at": record.created_at,
        "run": record.run_id,
        "aliases": sorted(aliases),
        "name": record.metadata.get("name") if isinstance(record.metadata, dict) else None,
    }


def search(
    ws: Workspace, query: str = "", kind: str = "", offset: int = 0, limit: int = MAX_RESULTS
) -> list[dict[str, Any]]:
    """Newest first, skipping `offset`: artifacts whose id, alias or metadata name contains
    `query` (ignoring the case of ASCII letters), of `kind` if given; at most `limit`."""
    if len(query) > 200 or len(kind) > 100:
        raise InvalidInput("search: query and kind are at most 200 and 100 characters")
    if offset < 0 or not 1 <= limit <= MAX_RESULTS:
        raise InvalidInput(f"search: offset must be >= 0 and limit 1 to {MAX_RESULTS}")
    names = _aliases_by_target(ws)
    needle = _ascii_lower(query.strip())
    found = []
    for record in _candidates(ws, needle, kind):
        row = _summary(record, names.get(record.id, []))
        haystack = [record.id, *row["aliases"], str(row["name"] or "")]
        if needle and not any(needle in _ascii_lower(text) for text in haystack):
            continue
        if offset:
            offset -= 1
            continue
        found.append(row)
        if len(found) == limit:
            break
    return found


def _ascii_lower(text: str) -> str:
    """Lower case as SQL's `lower()` does on both databases for the text searched here."""
    return text.translate(_ASCII_LOWER)


_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_SEARCH_BATCH = 500
_COLUMNS = "id, kind, size, file_count, created_at, run_id, metadata"  # ArtifactRecord's order


def _candidates(ws: Workspace, needle: str, kind: str) -> Iterator[ArtifactRecord]:
    """Artifacts newest first that may match: all of them on a catalog without SQL; on SQL, a
    superset of the matches found by the database, read in batches, so a search reads about
    as many rows as it shows rather than the whole catalog."""
    catalog = ws.catalog
    if not isinstance(catalog, SQLCatalog):
        yield from reversed(catalog.list_artifacts(kind or None))
        return
    where, params = [], []
    if kind:
        where.append("kind = ?")
        params.append(kind)
    if needle:
        # Metadata is stored as ASCII JSON: a name holding the needle holds it JSON-escaped.
        plain, escaped = _like(needle), _like(json.dumps(needle)[1:-1])
        where.append(
            "(lower(id) LIKE ? ESCAPE '\\' OR lower(metadata) LIKE ? ESCAPE '\\'"
            " OR id IN (SELECT artifact_id FROM aliases WHERE lower(name) LIKE ? ESCAPE '\\'))"
        )
        params += [plain, escaped, plain]
    query = f"SELECT {_COLUMNS} FROM artifacts"
    query += f" WHERE {' AND '.join(where)}" if where else ""
    query += " ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?"
    for start in itertools.count(0, _SEARCH_BATCH):
        rows = catalog.db.rows(query, (*params, _SEARCH_BATCH, start))
        for artifact_id, kind_, size, files, created_at, run_id, metadata in rows:
            meta = json.loads(metadata)
            yield ArtifactRecord(artifact_id, kind_, size, files, created_at, run_id, meta)
        if len(rows) < _SEARCH_BATCH:
            return


def _like(text: str) -> str:
    """A LIKE pattern matching `text` anywhere, its wildcards taken literally."""
    for char in ("\\", "%", "_"):
        text = text.replace(char, "\\" + char)
    return f"%{text}%"


def detail(ws: Workspace, ref: str) -> dict[str, Any]:
    """An artifact's record, files with their pieces, aliases and each alias's history."""
    artifact_id = ws.resolve(ref)
    manifest = ws.pieces.get_manifest(artifact_id)
    record = ws.catalog.get_artifact(artifact_id)
    aliases = _aliases_by_target(ws).get(artifact_id, [])
    return {
        "id": artifact_id,
        "kind": manifest.kind,
        "size": manifest.size,
        "piece_size": manifest.piece_size,
        "run": manifest.run or (record.run_id if record else None),
        "created_at": record.created_at if record else None,
        "metadata": manifest.metadata,
        "aliases": sorted(aliases),
        "alias_history": {
            name: [asdict(event) for event in ws.catalog.alias_history(name)]
            for name in sorted(aliases)
        },
        "files": [
            {
                "path": entry.path,
                "size": entry.size,
                "mode": entry.mode,
                "pieces": [
                    {"hash": p.hash, "offset": p.offset, "size": p.size} for p in entry.pieces
                ],
            }
            for entry in manifest.files
        ],
    }


def lineage(
    ws: Workspace, ref: str, direction: Literal["up", "down"], depth: int
) -> dict[str, Any]:
    """The graph `depth` edges up (sources) or down (derivatives) from `ref`: nodes and edges."""
    if not 1 <= depth <= MAX_DEPTH:
        raise InvalidInput(f"lineage depth {depth}: expected 1 to {MAX_DEPTH}")
    root = ws.resolve(ref)
    edges = ws.catalog.lineage(root, direction, depth, MAX_NODES)
    depth_of = {root: 0}
    for edge in edges:  # ordered by depth, so the first sighting is the shortest path
        far = edge.parent if direction == "up" else edge.child
        depth_of.setdefault(far, edge.depth)
    truncated = len(depth_of) > MAX_NODES
    kept = dict(list(depth_of.items())[:MAX_NODES])
    names = _aliases_by_target(ws)
    labels = _labels(ws, list(kept))
    nodes = [
        {"id": node, "level": level, "aliases": sorted(names.get(node, [])), **labels[node]}
        for node, level in kept.items()
    ]
    return {
        "root": root,
        "direction": direction,
        "depth": depth,
        "truncated": truncated,
        "nodes": nodes,
        "edges": [
            {"parent": e.parent, "child": e.child, "depth": e.depth}
            for e in edges
            if e.parent in kept and e.child in kept
        ],
    }


def _labels(ws: Workspace, ids: list[str]) -> dict[str, dict[str, str]]:
    """Type, kind (and a run's status) of each node: a few IN queries on a SQL catalog rather
    than one lookup per node, which is most of a big graph's time."""
    runs = [n for n in ids if n.startswith("run-")]
    out = {n: {"type": "run", "kind": "?", "status": "?"} for n in runs}
    out |= {n: {"type": "artifact", "kind": "?"} for n in ids if not n.startswith("run-")}
    catalog = ws.catalog
    if not isinstance(catalog, SQLCatalog):
        for node in ids:
            if node in runs:
                run = catalog.get_run(node)
                out[node] |= {"kind": run.kind, "status": run.status} if run else {}
            else:
                record = catalog.get_artifact(node)
                out[node]["kind"] = record.kind if record else "?"
        return out
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        marks = ", ".join("?" for _ in chunk)
        for node, kind, status in catalog.db.rows(
            f"SELECT id, kind, status FROM runs WHERE id IN ({marks})", tuple(chunk)
        ):
            out[node] |= {"kind": kind, "status": status}
        for node, kind in catalog.db.rows(
            f"SELECT id, kind FROM artifacts WHERE id IN ({marks})", tuple(chunk)
        ):
            out[node]["kind"] = kind
    return out
