"""MinHash signatures over word n-grams, vectorized with numpy, and LSH band keys.

Words are hashed once per distinct word (BLAKE2b, 64 bits); an n-gram's hash mixes its words'
hashes with the splitmix64 finalizer, as whole arrays. Because shingle hashes are already well
mixed, permutation i can be the cheap bijection x → a_i·x + b_i (mod 2^64, a_i odd): two array
operations per (shingle, permutation), done as one (shingles × permutations) array per chunk of
documents, never a Python loop per hash. `benchmarks/dedup_quality.py` checks the resulting
candidate rates against LSH theory.
"""

import hashlib
import re

import numpy as np
import numpy.typing as npt

U64 = npt.NDArray[np.uint64]
_WORD = re.compile(r"\w+")
_CHUNK = 1 << 14  # shingles per array operation: bounds memory at CHUNK × permutations × 8 bytes

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_EMPTY = np.array([0x6A09E667F3BCC908], dtype=np.uint64)  # stands for a document with no words


def splitmix64(x: U64) -> U64:
    z = x + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def shingles(text: str, n: int, cache: dict[str, int] | None = None) -> U64:
    """Hashes of the word n-grams of `text` (a text shorter than n words is one shingle)."""
    cache = {} if cache is None else cache
    tokens = words(text)
    if not tokens:
        return _EMPTY
    ids = np.fromiter(
        (cache.get(w) or _word_hash(w, cache) for w in tokens), np.uint64, len(tokens)
    )
    count = max(len(ids) - n + 1, 1)
    h = splitmix64(ids[:count].copy())
    for j in range(1, min(n, len(ids))):
        h = splitmix64(h ^ ids[j : j + count])
    return h


def _word_hash(word: str, cache: dict[str, int]) -> int:
    value = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little") or 1
    cache[word] = value
    return value


def permutations(num_perm: int, seed: int) -> U64:
    """A (2 × num_perm) array: odd multipliers, then offsets."""
    rng = np.random.default_rng(seed)
    params = rng.integers(0, 2**64 - 1, size=(2, num_perm), dtype=np.uint64, endpoint=True)
    params[0] |= np.uint64(1)
    return params


def _permute(hashes: U64, perms: U64) -> U64:
    mixed: U64 = hashes[:, None] * perms[0][None, :]
    mixed += perms[1][None, :]
    return mixed


def signatures(shingle_sets: list[U64], perms: U64) -> U64:
    """The (documents × permutations) MinHash matrix of each shingle set."""
    out = np.empty((len(shingle_sets), perms.shape[1]), dtype=np.uint64)
    start = 0
    while start < len(shingle_sets):
        stop, total = start, 0
        while stop < len(shingle_sets) and (
            total == 0 or total + len(shingle_sets[stop]) <= _CHUNK
        ):
            total += len(shingle_sets[stop])
            stop += 1
        if stop == start + 1 and total > _CHUNK:
            out[start] = _running_min(shingle_sets[start], perms)
        else:
            group = shingle_sets[start:stop]
            hashes = np.concatenate(group)
            offsets = np.cumsum([0] + [len(s) for s in group[:-1]])
            out[start:stop] = np.minimum.reduceat(_permute(hashes, perms), offsets, axis=0)
        start = stop
    return out


def _running_min(hashes: U64, perms: U64) -> U64:
    best = np.full(perms.shape[1], np.iinfo(np.uint64).max, dtype=np.uint64)
    for lo in range(0, len(hashes), _CHUNK):
        np.minimum(best, _permute(hashes[lo : lo + _CHUNK], perms).min(axis=0), out=best)
    return best


def band_keys(sigs: U64, bands: int, rows: int) -> U64:
    """One 64-bit key per (document, band): documents share a bucket when a band matches."""
    if sigs.shape[1] < bands * rows:
        raise ValueError(f"signature has {sigs.shape[1]} values; need bands × rows")
    keys = np.empty((sigs.shape[0], bands), dtype=np.uint64)
    for b in range(bands):
        key = np.full(sigs.shape[0], np.uint64(b), dtype=np.uint64)
        for r in range(rows):
            key = splitmix64(key ^ sigs[:, b * rows + r])
        keys[:, b] = key
    return keys


def jaccard(a: U64, b: U64) -> float:
    """Exact Jaccard similarity of two shingle-hash sets."""
    ua, ub = np.unique(a), np.unique(b)
    inter = len(np.intersect1d(ua, ub, assume_unique=True))
    union = len(ua) + len(ub) - inter
    return inter / union if union else 1.0
