"""Corpus snapshots and change logs: Parquet files of documents, read as hostile input.

A snapshot is a `dataset` artifact (`metadata.table = "corpus-snapshot"`) holding `docs.parquet`
with columns `doc_id` (string, unique, 1-512 characters) and `text` (binary: the bytes as
found, so text that is not UTF-8 is kept and counted rather than lost on the way in). A change
log (`metadata.table = "corpus-changes"`) adds `op`: `upsert` or `delete`. Reading decodes each
document strictly; empty and non-UTF-8 documents are reported with a reason, never dropped
silently.
"""

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from shipyard.errors import InvalidInput

DOCS_FILE = "docs.parquet"
CHANGES_FILE = "changes.parquet"
SNAPSHOT_TABLE = "corpus-snapshot"
CHANGES_TABLE = "corpus-changes"
OPS = ("upsert", "delete")
MAX_DOC_ID = 512
_ROW_GROUP = 1024


@dataclass(frozen=True)
class Doc:
    doc_id: str
    text: str | None  # None when `problem` says why it cannot be embedded
    problem: str | None = None  # "empty" or "non_utf8"
    op: str = "upsert"


def decode(doc_id: str, raw: bytes, op: str = "upsert") -> Doc:
    """One document's bytes as text, or the reason it has none."""
    if op == "delete":
        return Doc(doc_id, None, None, op)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return Doc(doc_id, None, "non_utf8", op)
    if not text.strip():
        return Doc(doc_id, None, "empty", op)
    return Doc(doc_id, text, None, op)


def write_docs(
    rows: Iterable[tuple[str, bytes] | tuple[str, bytes, str]], dest: Path, changes: bool = False
) -> int:
    """Write documents to `dest` (a folder) as `docs.parquet`, or `changes.parquet` with an `op`
    per row; returns how many. Checks what a reader will check, so bad input fails here first."""
    ids: list[str] = []
    texts: list[bytes] = []
    ops: list[str] = []
    for row in rows:
        ids.append(row[0])
        texts.append(bytes(row[1]))
        ops.append(str(row[2]) if len(row) == 3 else "upsert")
    columns: dict[str, pa.Array] = {
        "doc_id": pa.array(ids, pa.string()),
        "text": pa.array(texts, pa.binary()),
    }
    if changes:
        columns["op"] = pa.array(ops, pa.string())
    table = pa.table(columns)
    _check(table, str(dest), changes)
    dest.mkdir(parents=True, exist_ok=True)
    pq.write_table(
        table, dest / (CHANGES_FILE if changes else DOCS_FILE), row_group_size=_ROW_GROUP
    )
    return int(table.num_rows)


class DocTable:
    """The documents of one snapshot or change log file, by position."""

    def __init__(self, path: Path) -> None:
        changes = path.name == CHANGES_FILE
        try:
            table = pq.read_table(path)
            names = table.column_names  # Parquet does not promise UTF-8 names either
        except UnicodeDecodeError as exc:
            raise InvalidInput(f"{path}: a column name is not UTF-8 ({exc.reason})") from None
        except (OSError, pa.ArrowException, ValueError) as exc:
            raise InvalidInput(f"{path}: not a readable Parquet file ({str(exc)[:200]})") from None
        if "text" in names and pa.types.is_string(table.schema.field("text").type):
            table = table.set_column(names.index("text"), "text", table["text"].cast(pa.binary()))
        _check(table, str(path), changes)
        self.path = path
        self._ids: list[str] = table["doc_id"].to_pylist()
        self._texts = table["text"]
        self._ops: list[str] | None = table["op"].to_pylist() if changes else None

    def __len__(self) -> int:
        return len(self._ids)

    @property
    def doc_ids(self) -> list[str]:
        return list(self._ids)

    def docs(self, start: int = 0, end: int | None = None) -> Iterator[Doc]:
        end = len(self._ids) if end is None else min(end, len(self._ids))
        for i in range(max(0, start), end):
            raw = self._texts[i].as_py() or b""
            yield decode(self._ids[i], raw, self._ops[i] if self._ops else "upsert")


def _check(table: pa.Table, where: str, changes: bool) -> None:
    want = {"doc_id": pa.string(), "text": pa.binary()}
    if changes:
        want["op"] = pa.string()
    for name, kind in want.items():
        if name not in table.column_names:
            raise InvalidInput(f"{where}: no {name!r} column (columns: {table.column_names[:10]})")
        if table.schema.field(name).type != kind:
            raise InvalidInput(
                f"{where}: column {name!r} is {table.schema.field(name).type}, expected {kind}"
            )
    seen: set[str] = set()
    ops = _strings(table, "op", where) if changes else None
    for row, doc_id in enumerate(_strings(table, "doc_id", where)):
        if not isinstance(doc_id, str) or not 1 <= len(doc_id) <= MAX_DOC_ID:
            raise InvalidInput(f"{where}: row {row}: doc_id must be 1-{MAX_DOC_ID} characters")
        if doc_id in seen:
            raise InvalidInput(f"{where}: row {row}: doc_id {doc_id[:80]!r} appears twice")
        seen.add(doc_id)
        if ops is not None and ops[row] not in OPS:
            raise InvalidInput(f"{where}: row {row}: op must be upsert or delete, not {ops[row]!r}")


def _strings(table: pa.Table, name: str, where: str) -> list[Any]:
    """A string column's values; Parquet does not promise that its strings are UTF-8."""
    try:
        values: list[Any] = table[name].to_pylist()
    except UnicodeDecodeError as exc:
        raise InvalidInput(
            f"{where}: column {name!r} holds bytes that are not UTF-8 ({exc.reason})"
        ) from None
    return values
