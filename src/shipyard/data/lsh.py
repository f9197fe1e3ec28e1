"""LSH candidate edges and connected components, sharded and deterministic.

Documents are numbered globally (input files in sorted order, rows in file order). Band keys are
split into `partitions` shards by key; within a shard, the members of each (band, key) bucket are
sorted by number and each is linked to the bucket's minimum — star edges, one per member, instead
of all pairs — and only the first `cap` members of an oversized bucket are linked at all, so one
boilerplate bucket cannot produce a giant component. Edge shards are numpy files; components come
from min-label propagation that streams over the shards, so no process ever holds the edges as
Python objects, and the result (each document labelled by the smallest number in its component)
does not depend on shard order or timing.
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class EdgeStats:
    edges: int
    buckets_capped: int


def write_edge_shards(
    doc_ids: I64, keys: npt.NDArray[np.uint64], partitions: int, cap: int, folder: Path
) -> tuple[list[Path], EdgeStats]:
    """Star edges from LSH buckets, one .npy file of (member, bucket minimum) rows per shard."""
    folder.mkdir(parents=True, exist_ok=True)
    bands = np.broadcast_to(np.arange(keys.shape[1], dtype=np.int64), keys.shape)
    docs = np.broadcast_to(doc_ids[:, None], keys.shape)
    shard_of = keys % np.uint64(partitions)
    paths, total, capped = [], 0, 0
    for shard in range(partitions):
        mask = shard_of == np.uint64(shard)
        edges, n_capped = _bucket_edges(bands[mask], keys[mask], docs[mask], cap)
        path = folder / f"edges-{shard:05d}.npy"
        np.save(path, edges)
        paths.append(path)
        total += len(edges)
        capped += n_capped
    return paths, EdgeStats(total, capped)


def _bucket_edges(
    band: I64, key: npt.NDArray[np.uint64], doc: I64, cap: int
) -> tuple[npt.NDArray[np.int64], int]:
    if len(doc) == 0:
        return np.empty((0, 2), np.int64), 0
    order = np.lexsort((doc, key, band))
    band, key, doc = band[order], key[order], doc[order]
    new_bucket = np.ones(len(doc), dtype=bool)
    new_bucket[1:] = (band[1:] != band[:-1]) | (key[1:] != key[:-1])
    starts = np.flatnonzero(new_bucket)
    bucket = np.cumsum(new_bucket) - 1
    rank = np.arange(len(doc)) - starts[bucket]
    sizes = np.diff(np.append(starts, len(doc)))
    linked = (rank > 0) & (rank < cap)
    edges = np.stack([doc[linked], doc[starts[bucket[linked]]]], axis=1)
    return edges, int((sizes > cap).sum())


def components(num_docs: int, shards: list[Path]) -> I64:
    """Label every document with the smallest document number in its connected component."""
    labels = np.arange(num_docs, dtype=np.int64)
    changed = True
    while changed:
        before = labels.copy()
        for path in shards:
            edges = np.load(path)
            if len(edges) == 0:
                continue
            u, v = edges[:, 0], edges[:, 1]
            low = np.minimum(labels[u], labels[v])
            np.minimum.at(labels, u, low)
            np.minimum.at(labels, v, low)
        while True:  # pointer jumping: follow labels to their roots
            jumped = labels[labels]
            if np.array_equal(jumped, labels):
                break
            labels = jumped
        changed = not np.array_equal(before, labels)
    return labels
