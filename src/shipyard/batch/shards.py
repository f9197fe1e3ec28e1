"""Shard outputs: one Parquet file per shard at a path that is a function of (model version,
snapshot, shard's document range), written under a temporary name and renamed into place.

Columns: `doc_id` (string), `chunk_id` (int32), `vector` (fixed-size list of float32),
`model_version` (string). A zombie worker that finishes a shard already committed writes the
same rows to the same path: the rename replaces a file with an identical one, and readers only
ever see whole files.
"""

import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shipyard.errors import IntegrityError, InvalidInput
from shipyard.home import shipyard_home

if TYPE_CHECKING:
    from shipyard.batch.job import Shard


def outputs_root() -> Path:
    return shipyard_home() / "batch" / "outputs"


def shard_path(root: Path, model_version: str, snapshot: str, shard: "Shard") -> Path:
    """Named by the shard's document range, so that two plans of one snapshot share the
    shards they have in common and never overwrite each other's."""
    return root / model_version / snapshot / f"docs-{shard.start:09d}-{shard.end:09d}.parquet"


def shard_table(
    doc_ids: list[str], chunk_ids: list[int], vectors: np.ndarray, model_version: str
) -> pa.Table:
    dim = vectors.shape[1] if vectors.ndim == 2 else 0
    flat = pa.array(np.ascontiguousarray(vectors, np.float32).reshape(-1), pa.float32())
    return pa.table(
        {
            "doc_id": pa.array(doc_ids, pa.string()),
            "chunk_id": pa.array(chunk_ids, pa.int32()),
            "vector": pa.FixedSizeListArray.from_arrays(flat, dim),
            "model_version": pa.array([model_version] * len(doc_ids), pa.string()),
        }
    )


def commit(table: pa.Table, path: Path) -> None:
    """Write `table` to `path` whole or not at all (temp file, fsync, rename, fsync folder)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        pq.write_table(table, temp)
        with open(temp, "rb") as file:
            os.fsync(file.fileno())
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_shard(path: Path, model_version: str) -> pa.Table:
    """A committed shard, refused if it is damaged or holds another model's vectors."""
    try:
        table = pq.read_table(path)
    except FileNotFoundError:
        raise IntegrityError(
            f"shard output {path} is missing: the shard is not committed"
        ) from None
    except (OSError, pa.ArrowException) as exc:
        raise IntegrityError(f"shard output {path} is unreadable ({str(exc)[:200]})") from None
    names = ["doc_id", "chunk_id", "vector", "model_version"]
    if table.column_names != names:
        raise IntegrityError(f"shard output {path}: columns {table.column_names}, expected {names}")
    versions = set(table["model_version"].unique().to_pylist())
    if versions - {model_version}:
        raise IntegrityError(
            f"shard output {path} holds vectors of model {sorted(versions)[0][:16]}, "
            f"not {model_version[:16]}: refusing to mix model versions"
        )
    return table


def vectors_of(table: pa.Table) -> np.ndarray:
    column = table["vector"].combine_chunks()
    if not isinstance(column, pa.FixedSizeListArray):
        raise InvalidInput("vector column is not a fixed-size list")
    dim = column.type.list_size
    flat: np.ndarray = column.flatten().to_numpy(zero_copy_only=False)
    return flat.reshape(-1, dim).astype(np.float32)
