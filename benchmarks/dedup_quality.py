r"""MinHash-LSH quality on pairs of known Jaccard similarity built from real pages.

1. Candidate rate vs theory: pairs (page, edited copy) whose word 5-gram Jaccard similarity s is
   computed exactly (Python sets of 5-gram tuples of `\w+` words of the NFKC-lowercased text, a
   tokenizer independent of the one under test) and spread over [0, 1]; for each of `--seeds`
   hash seeds, a pair is a candidate when any of the 14 bands (8 rows each) of their signatures
   match. The mean candidate rate per similarity decile is compared with the mean of the theory
   1 − (1 − s⁸)¹⁴ at each pair's own s.
2. Clusters: families of a page and 1–3 independently edited copies go through Shipyard's
   dedup (`dedup_files`: LSH, components, exact-Jaccard cluster split). Pairwise precision and
   recall of the clusters against the exact-Jaccard truth at 0.75: the true clusters are the
   connected components of the graph whose edges are the document pairs at exact similarity
   ≥ 0.75 (every within-family pair is computed, and every predicted cross-family pair; pages
   are distinct documentation pages); a pair is a true duplicate pair when both documents share
   a true cluster. `direct_pair_*` count a pair as true only when its own similarity is ≥ 0.75.
   A copy's similarity to its page is drawn by `--mix`: `bimodal` (default) — half
   near-duplicates in [0.8, 1], half related pages in [0.4, 0.7], the mid-similarity pairs that
   make plain components chain — or `uniform` in [0.5, 1], which puts many pairs right at the
   threshold, where 14 × 8 LSH finds a pair with probability 1 − (1 − 0.75⁸)¹⁴ ≈ 0.77 only.
   Precision and recall are means over `--cluster-seeds` hash seeds (minimums reported too).

Usage: .venv/bin/python benchmarks/dedup_quality.py [--pairs 1500] [--families 300] [--seeds 20]
       [--mix bimodal|uniform] [--cluster-seeds 5]
"""

import argparse
import itertools
import json
import random
import re
import tempfile
import unicodedata
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shipyard.data.batch import Quarantine
from shipyard.data.config import DedupConfig, PipelineConfig
from shipyard.data.corpus import build_warcs, texts
from shipyard.data.dedup import dedup_files
from shipyard.data.minhash import band_keys, batch_signatures, permutations, shingle_batch
from shipyard.data.stages import get_stage

N, BANDS, ROWS, THRESHOLD = 5, 14, 8, 0.75
WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    """The truth's words: `\\w+` runs of the NFKC-normalized, lowercased text. Deliberately not
    the tokenizer under test (`shipyard.data.words`), so a tokenizer that splits words wrongly
    shows up as a gap between candidate rates and theory."""
    return WORD.findall(unicodedata.normalize("NFKC", text).lower())


def grams(text: str) -> set[tuple[str, ...]]:
    w = words(text)
    return {tuple(w[i : i + N]) for i in range(max(len(w) - N + 1, 1))}


def exact_jaccard(a: str, b: str) -> float:
    x, y = grams(a), grams(b)
    return len(x & y) / len(x | y)


def edit(text: str, similarity: float, vocabulary: list[str], rng: random.Random) -> str:
    """Substitute words at the rate that gives about `similarity` (5-gram survival (1-p)^5)."""
    survive = 2 * similarity / (1 + similarity)
    p = 1 - survive ** (1 / N)
    return " ".join(w if rng.random() > p else rng.choice(vocabulary) for w in words(text))


def similarity(mix: str, rng: random.Random) -> float:
    if mix == "uniform":
        return rng.uniform(0.5, 1.0)
    return rng.uniform(0.8, 1.0) if rng.random() < 0.5 else rng.uniform(0.4, 0.7)


def theory(s: np.ndarray) -> np.ndarray:
    return 1 - (1 - s**ROWS) ** BANDS  # type: ignore[no-any-return]


def candidate_rates(pairs: list[tuple[str, str]], seeds: int) -> np.ndarray:
    docs = [d for pair in pairs for d in pair]
    hashes, offsets = shingle_batch(docs, N)
    hits = np.zeros(len(pairs))
    for seed in range(seeds):
        sigs = batch_signatures(hashes, offsets, permutations(BANDS * ROWS, 1000 + seed))
        keys = band_keys(sigs, BANDS, ROWS)
        hits += (keys[0::2] == keys[1::2]).any(axis=1)
    return hits / seeds


def cluster_quality(families: list[list[str]], work: Path, seed: int) -> dict[str, float]:
    docs = [d for family in families for d in family]
    family_of = [i for i, family in enumerate(families) for _ in family]
    config = PipelineConfig("bench", ("-",), dedup=DedupConfig(seed=seed))
    batch = {"doc_id": [str(i) for i in range(len(docs))], "text": docs}
    batch = get_stage("minhash")(config).process(batch, Quarantine("bench"))
    batch["url"] = [f"https://bench/{i}" for i in range(len(docs))]
    path = work / "docs.parquet"
    pq.write_table(pa.table(batch), path)
    tables, _ = dedup_files([path], config.dedup, work / f"dedup-{seed}")
    clusters = tables[0].column("dup_cluster").to_pylist()
    members: dict[int, list[int]] = {}
    for doc, cluster in enumerate(clusters):
        members.setdefault(cluster, []).append(doc)
    predicted = {p for m in members.values() for p in itertools.combinations(sorted(m), 2)}
    similarity: dict[tuple[int, int], float] = {}
    start = 0
    for family in families:  # every within-family pair, exactly
        for i, j in itertools.combinations(range(start, start + len(family)), 2):
            similarity[(i, j)] = exact_jaccard(docs[i], docs[j])
        start += len(family)
    for pair in predicted - similarity.keys():  # predicted cross-family pairs, exactly
        similarity[pair] = exact_jaccard(docs[pair[0]], docs[pair[1]])
    edges = {p for p, s in similarity.items() if s >= THRESHOLD}
    truth = _co_clustered(len(docs), edges)
    cross = sum(family_of[i] != family_of[j] for i, j in predicted)
    return {
        "precision": _ratio(len(predicted & truth), len(predicted)),
        "recall": _ratio(len(predicted & truth), len(truth)),
        "direct_pair_precision": _ratio(len(predicted & edges), len(predicted)),
        "direct_pair_recall": _ratio(len(predicted & edges), len(edges)),
        "true_pairs": len(truth),
        "cross_family_predicted_pairs": cross,
    }


def _ratio(hit: int, total: int) -> float:
    return round(hit / total, 4) if total else 1.0


def _co_clustered(n: int, edges: set[tuple[int, int]]) -> set[tuple[int, int]]:
    """Every pair of documents connected through edges (the truth graph's components)."""
    parent = list(range(n))

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for i, j in edges:
        parent[max(root(i), root(j))] = min(root(i), root(j))
    groups: dict[int, list[int]] = {}
    for doc in range(n):
        groups.setdefault(root(doc), []).append(doc)
    return {p for g in groups.values() for p in itertools.combinations(g, 2)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=1500)
    parser.add_argument("--families", type=int, default=300)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--mix", choices=["bimodal", "uniform"], default="bimodal")
    parser.add_argument("--cluster-seeds", type=int, default=5)
    parser.add_argument("--corpus", type=Path, help="folder of Debian WARCs (built if empty)")
    args = parser.parse_args()
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        warcs = build_warcs(args.corpus or Path(tmp) / "warc")
        python_docs = [w for w in warcs if w.name.startswith("python-doc")]
        pages = list(dict.fromkeys(texts(python_docs, min_words=150)))  # distinct pages only
        vocabulary = sorted({w for page in pages for w in words(page)})
        print(f"{len(pages)} pages of at least 150 words, {len(vocabulary)} distinct words")

        pairs, sims = [], []
        for _ in range(args.pairs):
            base = rng.choice(pages)
            copy = edit(base, rng.uniform(0.0, 1.0), vocabulary, rng)
            pairs.append((base, copy))
            sims.append(exact_jaccard(base, copy))
        s = np.array(sims)
        rates = candidate_rates(pairs, args.seeds)
        deciles = np.minimum((s * 10).astype(int), 9)
        deviations = {}
        for d in range(10):
            mask = deciles == d
            if mask.sum():
                deviation = float(rates[mask].mean() - theory(s[mask]).mean())
                deviations[f"{d / 10:.1f}-{(d + 1) / 10:.1f}"] = round(deviation, 4)
                print(
                    f"decile {d / 10:.1f}–{(d + 1) / 10:.1f}: {mask.sum():4d} pairs  "
                    f"rate {rates[mask].mean():.3f}  theory {theory(s[mask]).mean():.3f}  "
                    f"deviation {deviation:+.4f}"
                )

        chosen = rng.sample(pages, min(args.families, len(pages)))
        families = [
            [base] + [edit(base, similarity(args.mix, rng), vocabulary, rng) for _ in range(k)]
            for base, k in ((b, rng.randint(1, 3)) for b in chosen)
        ]
        # one clustering run depends on its hash seed: average over several
        runs = [cluster_quality(families, Path(tmp), seed) for seed in range(args.cluster_seeds)]
        quality = {k: round(float(np.mean([r[k] for r in runs])), 4) for k in runs[0]}
        quality["min_recall"] = min(r["recall"] for r in runs)
        quality["min_precision"] = min(r["precision"] for r in runs)
    print(
        f"clusters: precision {quality['precision']:.4f} recall {quality['recall']:.4f} "
        f"({quality['true_pairs']} true pairs)"
    )
    max_dev = max(abs(v) for v in deviations.values())
    result = {
        "name": "dedup_quality",
        "value": min(quality["precision"], quality["recall"]),
        "unit": "min(precision, recall)",
        **quality,
        "max_decile_deviation": round(max_dev, 4),
        "deviations": deviations,
        "seeds": args.seeds,
        "pairs": args.pairs,
        "families": len(families),
        "mix": args.mix,
        "cluster_seeds": args.cluster_seeds,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
