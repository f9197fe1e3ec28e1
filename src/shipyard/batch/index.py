"""Search indexes from committed shards: gather the vectors (merging a change log's), build a
faiss index, measure its recall@10 against exact search on held-out queries, store it all as an
`index` artifact.

The artifact holds `index.faiss` and `rows.parquet` (row → `doc_id`, `chunk_id`); its metadata
names the model version, the snapshot, the change log, the index kind and `recall_at_10`, which
the cut-over gate reads.
"""

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shipyard.batch.config import IndexConfig
from shipyard.batch.job import Job
from shipyard.batch.shards import read_shard, shard_path, vectors_of
from shipyard.batch.snapshot import CHANGES_FILE
from shipyard.errors import IntegrityError
from shipyard.workspace import Workspace

INDEX_FILE = "index.faiss"
ROWS_FILE = "rows.parquet"
K = 10


@dataclass
class Vectors:
    doc_ids: list[str]
    chunk_ids: list[int]
    matrix: np.ndarray  # (rows, dim) float32, unit length


def collect(job: Job) -> Vectors:
    """Every committed shard of `job`, each read once; a missing shard, another model's vectors
    or a (doc, chunk) seen twice is an `IntegrityError`."""
    tables = [
        read_shard(shard_path(Path(job.output), job.model, job.snapshot, s), job.model)
        for s in job.shards
    ]
    table = pa.concat_tables(tables) if tables else None
    if table is None or table.num_rows == 0:
        raise IntegrityError(f"job {job.id[:16]} has no committed vectors")
    out = Vectors(table["doc_id"].to_pylist(), table["chunk_id"].to_pylist(), vectors_of(table))
    keys = set(zip(out.doc_ids, out.chunk_ids, strict=True))
    if len(keys) != len(out.doc_ids):
        raise IntegrityError(f"job {job.id[:16]}: {len(out.doc_ids) - len(keys)} duplicate chunks")
    return out


def merge(base: Vectors, changed_docs: set[str], changes: Vectors | None) -> Vectors:
    """`base` without every document the change log touched, plus the change log's vectors."""
    keep = [i for i, doc in enumerate(base.doc_ids) if doc not in changed_docs]
    merged = Vectors(
        [base.doc_ids[i] for i in keep], [base.chunk_ids[i] for i in keep], base.matrix[keep]
    )
    if changes is not None:
        merged.doc_ids += changes.doc_ids
        merged.chunk_ids += changes.chunk_ids
        merged.matrix = np.concatenate([merged.matrix, changes.matrix])
    return merged


def changed_doc_ids(ws: Workspace, changes_ref: str) -> set[str]:
    from shipyard.batch.models import cached
    from shipyard.batch.snapshot import DocTable

    return set(DocTable(cached(ws, changes_ref) / CHANGES_FILE).doc_ids)


def held_out_queries(vectors: np.ndarray, count: int, seed: int) -> np.ndarray:
    """Query vectors near the corpus but in it nowhere: sampled rows, each moved by Gaussian
    noise of about half its length, renormalized."""
    rng = np.random.default_rng(seed)
    rows = rng.choice(len(vectors), size=min(count, len(vectors)), replace=False)
    noise = rng.standard_normal((len(rows), vectors.shape[1])).astype(np.float32)
    noise *= 0.5 / np.sqrt(vectors.shape[1])
    queries = vectors[rows] + noise
    out: np.ndarray = (queries / np.linalg.norm(queries, axis=1, keepdims=True)).astype(np.float32)
    return out


def make_index(matrix: np.ndarray, config: IndexConfig) -> Any:
    dim = matrix.shape[1]
    if config.kind == "flat":
        index: Any = faiss.IndexFlatIP(dim)
    elif config.kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, config.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = config.ef_construction
        index.hnsw.efSearch = config.ef_search
    else:
        lists = config.ivf_lists or max(1, int(4 * np.sqrt(len(matrix))))
        lists = min(lists, len(matrix))
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, lists, faiss.METRIC_INNER_PRODUCT)
        index.train(matrix)
        index.nprobe = min(config.ivf_probe, lists)
    index.add(matrix)
    return index


def recall_at_k(index: Any, matrix: np.ndarray, queries: np.ndarray, k: int = K) -> float:
    """Mean share of the exact top-k (flat inner product) that `index` also returns."""
    exact = faiss.IndexFlatIP(matrix.shape[1])
    exact.add(matrix)
    k = min(k, len(matrix))
    _, truth = exact.search(queries, k)
    _, found = index.search(queries, k)
    hits = sum(len(set(t) & set(f)) for t, f in zip(truth.tolist(), found.tolist(), strict=True))
    return hits / (k * len(queries))


def build(
    ws: Workspace,
    vectors: Vectors,
    config: IndexConfig,
    *,
    model: str,
    snapshot: str,
    changes: str | None = None,
    name: str | None = None,
) -> tuple[str, float]:
    """Build, measure and store the index; returns (artifact id, recall@10)."""
    faiss.omp_set_num_threads(1)
    index = make_index(vectors.matrix, config)
    queries = held_out_queries(vectors.matrix, config.queries, config.seed)
    recall = recall_at_k(index, vectors.matrix, queries)
    with tempfile.TemporaryDirectory(prefix="shipyard-index-") as tmp:
        folder = Path(tmp)
        faiss.write_index(index, str(folder / INDEX_FILE))
        rows = pa.table(
            {
                "doc_id": pa.array(vectors.doc_ids, pa.string()),
                "chunk_id": pa.array(vectors.chunk_ids, pa.int32()),
            }
        )
        pq.write_table(rows, folder / ROWS_FILE)
        record = ws.put(
            folder,
            "index",
            name=name,
            inputs=[model, snapshot, *([changes] if changes else [])],
            metadata={
                "format": "faiss",
                "index": config.kind,
                "model_version": model,
                "snapshot": snapshot,
                "changes": changes,
                "chunks": len(vectors.doc_ids),
                "dim": int(vectors.matrix.shape[1]),
                "recall_at_10": round(recall, 6),
                "recall_queries": len(queries),
                "min_recall": config.min_recall,
            },
        )
    return record.id, recall
