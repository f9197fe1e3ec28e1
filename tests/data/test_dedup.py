import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shipyard.data.cluster import cluster_component
from shipyard.data.config import DedupConfig
from shipyard.data.dedup import dedup_files
from shipyard.data.lsh import components, write_edge_shards
from shipyard.data.minhash import (
    _word_ids,
    band_keys,
    batch_signatures,
    jaccard,
    permutations,
    shingle_batch,
    shingles,
    signatures,
    string_hashes,
)
from shipyard.data.stages.signature import content_hash
from shipyard.data.words import words

from .conftest import english_text


def _reference_signature(hashes: np.ndarray, perms: np.ndarray) -> np.ndarray:
    """One permutation at a time, in plain Python integers mod 2^64."""
    out = []
    for a, b in zip(perms[0].tolist(), perms[1].tolist(), strict=True):
        out.append(min((a * (int(h) % 2**32) + b) % 2**32 for h in hashes.tolist()))
    return np.array(out, dtype=np.uint32)


def test_vectorized_signatures_equal_a_per_hash_loop() -> None:
    perms = permutations(16, seed=3)
    sets = [shingles(english_text(i), 5) for i in range(5)] + [shingles("", 5)]
    sigs = signatures(sets, perms)
    for row, hashes in zip(sigs, sets, strict=True):
        assert np.array_equal(row, _reference_signature(hashes, perms))


def test_batch_shingles_equal_one_text_at_a_time() -> None:
    texts = [english_text(1), "", "two words", english_text(2), "a b c d e", "x"]
    hashes, offsets = shingle_batch(texts, 5)
    for i, text in enumerate(texts):
        single = shingle_batch([text], 5)[0]
        assert np.array_equal(hashes[offsets[i] : offsets[i + 1]], single)
    assert offsets[2] - offsets[1] == 1 and offsets[3] - offsets[2] == 1
    assert len(set(hashes[offsets[1] : offsets[3]].tolist())) == 2
    perms = permutations(16, 5)
    assert np.array_equal(
        batch_signatures(hashes, offsets, perms),
        signatures([hashes[offsets[i] : offsets[i + 1]] for i in range(len(texts))], perms),
    )


def test_long_document_takes_the_running_minimum_path() -> None:
    text = " ".join(f"w{i}" for i in range(10_000))
    perms = permutations(8, seed=1)
    hashes = shingles(text, 5)
    assert len(hashes) > 1 << 12
    assert np.array_equal(signatures([hashes], perms)[0], _reference_signature(hashes, perms))


def test_signature_agreement_estimates_jaccard() -> None:
    words = english_text(11, paragraphs=12).split()
    rng = random.Random(0)
    edited = [w if rng.random() > 0.03 else "zzz" for w in words]
    a, b = shingles(" ".join(words), 5), shingles(" ".join(edited), 5)
    truth = jaccard(a, b)
    estimates = [
        float((lambda s: (s[0] == s[1]).mean())(signatures([a, b], permutations(112, seed))))
        for seed in range(30)
    ]
    assert abs(np.mean(estimates) - truth) < 0.03


def test_band_keys_match_only_when_a_band_matches() -> None:
    sigs = np.arange(2 * 16, dtype=np.uint32).reshape(2, 16)
    sigs[1, :8] = sigs[0, :8]  # band 0 equal, band 1 differs
    keys = band_keys(sigs, 2, 8)
    assert keys[0, 0] == keys[1, 0] and keys[0, 1] != keys[1, 1]


def test_star_edges_cap_and_components_are_deterministic(tmp_path: Path) -> None:
    # docs 0..4 share band 0; 5,6 share band 1; 7 alone
    keys = np.array([[1, 10], [1, 11], [1, 12], [1, 13], [1, 14], [2, 20], [3, 20], [4, 30]])
    keys = keys.astype(np.uint64)
    docs = np.arange(8, dtype=np.int64)
    shards, stats = write_edge_shards(docs, keys, 3, cap=1000, folder=tmp_path / "a")
    edges = np.concatenate([np.load(p) for p in shards])
    assert sorted(map(tuple, edges.tolist())) == [(1, 0), (2, 0), (3, 0), (4, 0), (6, 5)]
    labels = components(8, shards)
    assert labels.tolist() == [0, 0, 0, 0, 0, 5, 5, 7]
    for partitions in (1, 2, 7):
        other, _ = write_edge_shards(docs, keys, partitions, 1000, tmp_path / f"p{partitions}")
        assert components(8, other).tolist() == labels.tolist()
    capped, capped_stats = write_edge_shards(docs, keys, 2, cap=3, folder=tmp_path / "cap")
    assert capped_stats.buckets_capped == 1
    assert components(8, capped).tolist() == [0, 0, 0, 3, 4, 5, 5, 7]
    assert stats.edges == 5


def test_components_follow_long_chains(tmp_path: Path) -> None:
    n = 200
    edges = np.array([[i + 1, i] for i in range(n - 1)][::-1], dtype=np.int64)
    np.save(tmp_path / "e.npy", edges)
    assert set(components(n, [tmp_path / "e.npy"]).tolist()) == {0}


def test_clusters_link_only_verified_pairs() -> None:
    words = english_text(2, paragraphs=10).split()
    third = len(words) // 3
    # a~b and a~c share two thirds each; b and c share only the middle third; d is unrelated
    a = words
    b = words[: 2 * third] + ["x"] * (len(words) - 2 * third)
    c = ["y"] * third + words[third:]
    d = english_text(3, paragraphs=10).split()
    sets = {i: shingles(" ".join(t), 5) for i, t in enumerate((a, b, c, d))}
    sets[4] = sets[0].copy()
    assert (
        jaccard(sets[1], sets[2]) < 0.5 <= min(jaccard(sets[0], sets[1]), jaccard(sets[0], sets[2]))
    )
    strict = cluster_component([0, 1, 2, 3, 4], sets, 0.9)
    assert strict == {0: 0, 1: 1, 2: 2, 3: 3, 4: 0}  # only the exact copy joins doc 0
    loose = cluster_component([4, 3, 2, 1, 0], sets, 0.5)
    assert loose == {0: 0, 1: 0, 2: 0, 3: 3, 4: 0}  # b and c join through a; d never does


def _file(tmp_path: Path, name: str, texts: list[str], config: DedupConfig) -> Path:
    perms = permutations(config.bands * config.rows, config.seed)
    sets = [shingles(t, config.ngram) for t in texts]
    keys = band_keys(signatures(sets, perms), config.bands, config.rows)
    path = tmp_path / f"{name}.parquet"
    table = {
        "url": [f"https://{name}/{i}" for i in range(len(texts))],
        "text": texts,
        "content_hash": [content_hash(t) for t in texts],
        "band_keys": [row.tobytes() for row in keys],
    }
    pq.write_table(pa.table(table), path)
    return path


def test_dedup_files_exact_near_and_keep_rule(tmp_path: Path) -> None:
    config = DedupConfig(partitions=3)
    base = english_text(21, paragraphs=8)
    words = base.split()
    near = " ".join([*words[:-3], "one", "two", "three"])
    other = english_text(22, paragraphs=8)
    a = _file(tmp_path, "a", [base, other], config)
    b = _file(tmp_path, "b", [base.upper() + "!!", near, english_text(23)], config)
    tables, stats = dedup_files([a, b], config, tmp_path / "work")
    keep_exact = [v for t in tables for v in t.column("keep_exact").to_pylist()]
    keep_minhash = [v for t in tables for v in t.column("keep_minhash").to_pylist()]
    clusters = [v for t in tables for v in t.column("dup_cluster").to_pylist()]
    assert keep_exact == [True, True, False, True, True]  # case and punctuation normalized
    assert keep_minhash == [True, True, False, False, True]
    assert clusters[2] == clusters[3] == 0  # exact and near copies join the earliest's cluster
    assert stats.exact_duplicates == 1 and stats.near_duplicates == 1


def test_minhash_hashes_the_shared_tokenizers_words() -> None:
    text = "  Hello, World!  «Ça va?» — (yes) it's 3.11… end.\nNew\tline “quoted” __x__ ... ¿qué?"
    expected = words(text)
    assert expected[:4] == ["hello", "world", "ça", "va"]
    ids, lengths = _word_ids([text, "", "only"])
    assert lengths.tolist() == [len(expected), 0, 1]
    assert ids.tolist()[: len(expected)] == string_hashes(pa.array(expected)).tolist()


def test_string_hashes_are_distinct_and_stable() -> None:
    vocabulary = sorted({w for i in range(30) for w in words(english_text(i))} | {"a", "ab", "ba"})
    hashes = string_hashes(pa.array(vocabulary)).tolist()
    assert len(set(hashes)) == len(vocabulary)
    sliced = pa.array(["zz", *vocabulary])[1:]  # an Arrow slice with a non-zero offset
    assert string_hashes(sliced).tolist() == hashes
