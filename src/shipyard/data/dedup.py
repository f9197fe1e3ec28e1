"""Global dedup over every task's output: exact URL, exact content, then MinHash-LSH clusters.

Reads only the key columns of each file's committed output, and texts only for documents that
share an LSH component. Produces, per input file, the dedup columns joined into the annotated
table: `keep_url`, `keep_exact` (first of its normalized-content hash), `dup_cluster` (number
of the cluster's representative; exact copies join their original's cluster) and
`keep_minhash` (this document represents its cluster).
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


def _first_of(values: np.ndarray) -> I64:
    """For each position, the first position holding the same value."""
    if not len(values):
        return np.zeros(0, np.int64)
    _, first, inverse = np.unique(values, return_index=True, return_inverse=True)
    return first[inverse].astype(np.int64)


def _canonical(first_url: I64, first_content: I64) -> I64:
    """Each document's earliest URL-and-content original (itself when it is one): first
    occurrences only point backwards, so following them ends at a document that is both."""
    canonical = np.minimum(first_url, first_content)
    while True:
        nxt = np.minimum(first_url[canonical], first_content[canonical])
        if np.array_equal(nxt, canonical):
            return canonical
        canonical = nxt


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
    first_url, first_content = _first_of(urls), _first_of(content)
    keep_url = first_url == np.arange(n)
    keep_exact = first_content == np.arange(n)
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
    reps = reps[_canonical(first_url, first_content)]  # exact copies join their original's cluster
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
