"""Split LSH components into duplicate clusters by exact n-gram Jaccard.

Connected components over raw LSH candidates chain: a candidate edge between two documents that
share half their n-grams merges two unrelated clusters. Here an edge counts only when the exact
Jaccard similarity of the two documents' n-gram sets reaches `threshold`, and clusters are the
connected components of those verified edges. Within a component of at most `ALL_PAIRS` members
every pair is checked (recovering pairs whose own bands never collided); larger components check
each member against the representatives of the clusters found so far. The keep rule: the earliest
document (lowest number: first input file, first record) represents its cluster and is kept.
Components are processed in shards by label, each shard loading only its own members' texts.
"""

import itertools
from collections.abc import Callable

import numpy as np

from shipyard.data.lsh import I64
from shipyard.data.minhash import U64, jaccard, shingles

ALL_PAIRS = 64


def cluster_component(members: list[int], sets: dict[int, U64], threshold: float) -> dict[int, int]:
    """Each member's cluster representative (the cluster's smallest member)."""
    ordered = sorted(members)
    parent = {doc: doc for doc in ordered}

    def root(doc: int) -> int:
        while parent[doc] != doc:
            parent[doc] = parent[parent[doc]]
            doc = parent[doc]
        return doc

    def link(a: int, b: int) -> None:
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    if len(ordered) <= ALL_PAIRS:
        for a, b in itertools.combinations(ordered, 2):
            if root(a) != root(b) and jaccard(sets[a], sets[b]) >= threshold:
                link(a, b)
    else:
        reps: list[int] = []
        for doc in ordered:
            match = next((r for r in reps if jaccard(sets[doc], sets[r]) >= threshold), None)
            if match is None:
                reps.append(doc)
            else:
                link(doc, match)
    return {doc: root(doc) for doc in ordered}


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
        sets = {n: shingles(t, ngram) for n, t in texts_for(numbers).items()}
        order = np.argsort(labels[numbers], kind="stable")
        grouped = numbers[order]
        bounds = np.flatnonzero(np.diff(labels[grouped])) + 1
        for group in np.split(grouped, bounds):
            for doc, rep in cluster_component([int(g) for g in group], sets, threshold).items():
                reps[doc] = rep
    return reps
