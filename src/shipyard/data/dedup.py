"""Global dedup over every task's output: exact URL, exact content, then MinHash-LSH clusters.

Reads only the key columns of each file's committed output, and texts only for documents that
share an LSH component. Produces, per input file, the dedup columns joined into the annotated
table: `keep_url`, `keep_exact` (first of its normalized-content hash), `dup_cluster` (number of
the cluster's representative) and `keep_minhash` (this document represents its cluster).
"""

import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shipyard.data.cluster import cluster_all
from shipyard.data.config import DedupConfig
from shipyard.data.lsh import I64, components, write_edge_shards


@dataclass(frozen=True)
class DedupStats:
    documents: int
    url_duplicates: int
    exact_duplicates: int
    lsh_edges: int
    buckets_capped: int
    components: int
    near_duplicates: int


def _first_occurrence(values: np.ndarray) -> np.ndarray:
    keep = np.zeros(len(values), dtype=bool)
    if len(values):
        keep[np.unique(values, return_index=True)[1]] = True
    return keep


def _url_hash(url: str) -> int:
    return int.from_bytes(hashlib.blake2b(url.encode(), digest_size=8).digest(), "little")


def dedup_files(
    files: list[Path], config: DedupConfig, work: Path
) -> tuple[list[pa.Table], DedupStats]:
    """Dedup columns for each of `files` (committed `data.parquet` paths), in the same order."""
    columns = ["content_hash", "band_keys", "url"]
    parts = [pq.read_table(f, columns=columns) for f in files]
    sizes = [p.num_rows for p in parts]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(offsets[-1])
    content = np.array(
        [h for p in parts for h in p.column("content_hash").to_pylist()], dtype=np.int64
    )
    urls = np.array([_url_hash(u) for p in parts for u in p.column("url").to_pylist()], np.uint64)
    keep_url = _first_occurrence(urls)
    keep_exact = _first_occurrence(content)
    alive = keep_exact & keep_url
    raw = b"".join(b for p in parts for b in p.column("band_keys").to_pylist())
    keys = np.frombuffer(raw, dtype=np.uint64).reshape(n, config.bands)
    numbers = np.flatnonzero(alive).astype(np.int64)
    shards, edge_stats = write_edge_shards(
        numbers, keys[numbers], config.partitions, config.bucket_cap, work / "edges"
    )
    labels = components(n, shards)

    def texts_for(wanted: I64) -> dict[int, str]:
        found: dict[int, str] = {}
        for index in np.unique(np.searchsorted(offsets, wanted, side="right") - 1):
            local = wanted[(wanted >= offsets[index]) & (wanted < offsets[index + 1])]
            texts = pq.read_table(files[index], columns=["text"]).column("text")
            for number in local:
                found[int(number)] = texts[int(number - offsets[index])].as_py()
        return found

    reps = cluster_all(labels, alive, texts_for, config.ngram, config.threshold, config.partitions)
    keep_minhash = reps == np.arange(n)
    tables = []
    for index in range(len(files)):
        lo, hi = offsets[index], offsets[index + 1]
        tables.append(
            pa.table(
                {
                    "doc_number": np.arange(lo, hi, dtype=np.int64),
                    "keep_url": keep_url[lo:hi],
                    "keep_exact": keep_exact[lo:hi],
                    "dup_cluster": reps[lo:hi],
                    "keep_minhash": keep_minhash[lo:hi],
                }
            )
        )
    multi = np.bincount(labels[alive], minlength=n) if n else np.zeros(0, np.int64)
    stats = DedupStats(
        documents=n,
        url_duplicates=int((~keep_url).sum()),
        exact_duplicates=int((keep_url & ~keep_exact).sum()),
        lsh_edges=edge_stats.edges,
        buckets_capped=edge_stats.buckets_capped,
        components=int((multi > 1).sum()),
        near_duplicates=int((alive & ~keep_minhash).sum()),
    )
    return tables, stats


def stats_dict(stats: DedupStats) -> dict[str, Any]:
    return asdict(stats)
