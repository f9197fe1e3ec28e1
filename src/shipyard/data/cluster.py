"""Split LSH components into duplicate clusters by exact n-gram Jaccard.

Connected components over LSH candidates chain: A~B and B~C put A and C together even when
they share little. Within each component, documents are taken in number order (the keep rule:
the earliest document — first input file, first record — represents its cluster) and each joins
the first cluster whose members it matches at `threshold` or more (complete linkage, checking
at most `MAX_CHECKS` members), else founds a new one. Components are processed in shards by
label, each shard needing only its own members' texts.
"""

from collections.abc import Callable

import numpy as np

from shipyard.data.lsh import I64
from shipyard.data.minhash import U64, jaccard, shingles

MAX_CHECKS = 32


def cluster_component(members: list[int], sets: dict[int, U64], threshold: float) -> dict[int, int]:
    """Each member's cluster representative (the cluster's smallest member)."""
    clusters: list[list[int]] = []
    rep: dict[int, int] = {}
    for doc in sorted(members):
        for cluster in clusters:
            if all(jaccard(sets[doc], sets[m]) >= threshold for m in cluster[:MAX_CHECKS]):
                cluster.append(doc)
                rep[doc] = cluster[0]
                break
        else:
            clusters.append([doc])
            rep[doc] = doc
    return rep


def cluster_all(
    labels: I64,
    alive: np.ndarray,
    texts_for: Callable[[I64], dict[int, str]],
    ngram: int,
    threshold: float,
    shards: int,
) -> I64:
    """Representative of every document; documents outside any multi-member component are their
    own. `texts_for(numbers)` loads the texts of the given documents."""
    reps = np.arange(len(labels), dtype=np.int64)
    candidates = np.flatnonzero(alive)
    counts = np.bincount(labels[candidates], minlength=len(labels))
    shared = candidates[counts[labels[candidates]] > 1]
    for shard in range(shards):
        numbers = shared[labels[shared] % shards == shard]
        if len(numbers) == 0:
            continue
        cache: dict[str, int] = {}
        sets = {n: shingles(t, ngram, cache) for n, t in texts_for(numbers).items()}
        order = np.argsort(labels[numbers], kind="stable")
        grouped = numbers[order]
        bounds = np.flatnonzero(np.diff(labels[grouped])) + 1
        for group in np.split(grouped, bounds):
            for doc, rep in cluster_component([int(g) for g in group], sets, threshold).items():
                reps[doc] = rep
    return reps
