"""MinHash signatures over word n-grams, vectorized with numpy, and LSH band keys.

Words are `shipyard.data.words.words` (word-character runs of the NFKC-normalized, lowercased
text), hashed as one array (a polynomial over their UTF-8 bytes, finalized with splitmix64); an
n-gram's hash mixes its words' hashes, as whole arrays too. Because shingle hashes are well
mixed, permutation i can be the cheap bijection x → a_i·x + b_i (mod 2^32 on the low 32 bits,
a_i odd): two array operations per (shingle, permutation), done as one (shingles × permutations)
array per chunk of documents, never a Python loop per hash. `benchmarks/dedup_quality.py`
checks the resulting candidate rates against LSH theory.
"""

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from shipyard.data.words import word_lists

U64 = npt.NDArray[np.uint64]
U32 = npt.NDArray[np.uint32]
I64 = npt.NDArray[np.int64]
Shingles = tuple[U64, I64]
_CHUNK = 1 << 10  # shingles per array operation: CHUNK × permutations × 4 bytes stays in cache

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
# distinct odd multipliers, one per position in an n-gram window (positions beyond 16 reuse them)
_WINDOW = np.random.default_rng(0x5EED).integers(1, 2**63, 16, dtype=np.uint64) * np.uint64(
    2
) + np.uint64(1)
_BYTE_BASE = np.uint64(0x100000001B3)  # the 64-bit FNV prime, as a polynomial base
_EMPTY = np.array([0x6A09E667F3BCC908], dtype=np.uint64)  # stands for a document with no words


def splitmix64(x: U64) -> U64:
    z = x + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def _word_ids(texts: list[str]) -> tuple[U64, I64]:
    """Every word's 64-bit id, concatenated over `texts`, and each text's word count.

    The words of `shipyard.data.words.words`, split by Arrow's C++ kernels (`word_lists`);
    the distinct words are hashed as one array (`string_hashes`), so no Python code runs per
    word.
    """
    lists = word_lists(texts)
    flat = lists.flatten()
    nonempty = pc.greater(pc.utf8_length(flat), 0)
    parents = np.asarray(lists.value_parent_indices().filter(nonempty).to_numpy())
    lengths = np.bincount(parents, minlength=len(texts)).astype(np.int64)
    # Hash each distinct word once: a batch repeats its vocabulary many times over.
    encoded = pc.dictionary_encode(flat.filter(nonempty))
    indices = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    return string_hashes(encoded.dictionary)[indices], lengths


def string_hashes(strings: pa.Array) -> U64:
    """64-bit hashes of non-empty strings: Σ byte_k·P^k (mod 2^64) over each string's UTF-8
    bytes, then splitmix64 of that mixed with the length — as array operations over the data
    buffer."""
    strings = pa.array(strings, pa.large_string()) if len(strings) else strings
    if len(strings) == 0:
        return np.empty(0, np.uint64)
    _, offset_buffer, data_buffer = strings.buffers()
    offsets = np.frombuffer(offset_buffer, np.int64)[
        strings.offset : strings.offset + len(strings) + 1
    ]
    data = np.frombuffer(data_buffer, np.uint8)[offsets[0] : offsets[-1]].astype(np.uint64)
    sizes = np.diff(offsets)
    starts = offsets[:-1] - offsets[0]
    within = np.arange(len(data)) - np.repeat(starts, sizes)
    powers = np.cumprod(np.full(int(sizes.max()), _BYTE_BASE, np.uint64))
    sums = np.add.reduceat(data * powers[within], starts)
    return splitmix64(sums ^ (sizes.astype(np.uint64) << np.uint64(48)))


def shingle_batch(texts: list[str], n: int) -> Shingles:
    """The word n-gram hashes of every text, concatenated, with per-text offsets.

    One pass of array operations over the whole batch's words, so numpy's per-call overhead is
    paid per batch, not per document; n-grams that would straddle two texts are dropped. A text
    shorter than n words is one shingle; an empty text gets a fixed stand-in.
    """
    ids, lengths = _word_ids(texts)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    grams = _ngram_hashes(ids, n)
    counts = np.maximum(lengths - n + 1, 1)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    # document d's k-th shingle starts at word starts[d] + k; short texts are filled in below
    within = np.arange(offsets[-1]) - np.repeat(offsets[:-1], counts)
    positions = np.repeat(starts[:-1], counts) + within
    out = np.zeros(int(offsets[-1]), np.uint64)
    full = np.repeat(lengths >= n, counts)
    out[full] = grams[positions[full]]
    for d in np.flatnonzero(lengths < n):  # short or empty texts: one shingle each
        short = ids[starts[d] : starts[d + 1]]
        out[offsets[d]] = _ngram_hashes(short, len(short))[0] if len(short) else _EMPTY[0]
    return out, offsets


def _ngram_hashes(ids: U64, n: int) -> U64:
    """Σ_j K_j·id[i+j] (mod 2^64) over each window, then one splitmix64 finalization: two array
    operations per word of the window instead of a full mixing round."""
    count = len(ids) - n + 1
    if count <= 0:
        return np.empty(0, np.uint64)
    h = ids[:count] * _WINDOW[0]
    for j in range(1, n):
        h += ids[j : j + count] * _WINDOW[j % len(_WINDOW)]
    return splitmix64(h)


def shingles(text: str, n: int) -> U64:
    """Hashes of the word n-grams of one text."""
    return shingle_batch([text], n)[0]


def permutations(num_perm: int, seed: int) -> U32:
    """A (2 × num_perm) array: odd multipliers, then offsets."""
    rng = np.random.default_rng(seed)
    params = rng.integers(0, 2**32 - 1, size=(2, num_perm), dtype=np.uint32, endpoint=True)
    params[0] |= np.uint32(1)
    return params


def _permute(hashes: U32, perms: U32, buffer: U32 | None = None) -> U32:
    """a·x + b for every (shingle, permutation), into `buffer` when given (saves allocations)."""
    out = buffer[: len(hashes)] if buffer is not None else None
    mixed: U32 = np.multiply(hashes[:, None], perms[0][None, :], out=out)
    mixed += perms[1][None, :]
    return mixed


def signatures(shingle_sets: list[U64], perms: U32) -> U32:
    """The (documents × permutations) MinHash matrix of each shingle set."""
    lengths = [len(x) for x in shingle_sets]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return batch_signatures(np.concatenate(shingle_sets), offsets, perms)


def batch_signatures(hashes: U64, offsets: I64, perms: U32) -> U32:
    """Signatures of the documents `hashes[offsets[i]:offsets[i+1]]` (each non-empty).

    Permutations work on the low 32 bits of each (well-mixed) shingle hash: half the memory
    traffic of 64-bit arithmetic, and 32-bit minimums collide too rarely to bias estimates.
    """
    low = hashes.astype(np.uint32)
    docs = len(offsets) - 1
    out = np.empty((docs, perms.shape[1]), dtype=np.uint32)
    buffer = np.empty((_CHUNK, perms.shape[1]), dtype=np.uint32)
    start = 0
    while start < docs:
        # the most documents from `start` whose shingles fit one chunk (at least one)
        stop = int(np.searchsorted(offsets, offsets[start] + _CHUNK, side="right")) - 1
        stop = min(max(stop, start + 1), docs)
        lo, hi = int(offsets[start]), int(offsets[stop])
        if stop == start + 1 and hi - lo > _CHUNK:
            out[start] = _running_min(low[lo:hi], perms, buffer)
        else:
            mixed = _permute(low[lo:hi], perms, buffer)
            out[start:stop] = np.minimum.reduceat(mixed, offsets[start:stop] - lo, axis=0)
        start = stop
    return out


def _running_min(hashes: U32, perms: U32, buffer: U32) -> U32:
    best = np.full(perms.shape[1], np.iinfo(np.uint32).max, dtype=np.uint32)
    for lo in range(0, len(hashes), _CHUNK):
        mixed = _permute(hashes[lo : lo + _CHUNK], perms, buffer)
        np.minimum(best, mixed.min(axis=0), out=best)
    return best


def band_keys(sigs: U32, bands: int, rows: int) -> U64:
    """One 64-bit key per (document, band): documents share a bucket when a band matches."""
    if sigs.shape[1] < bands * rows:
        raise ValueError(f"signature has {sigs.shape[1]} values; need bands × rows")
    keys = np.empty((sigs.shape[0], bands), dtype=np.uint64)
    for b in range(bands):
        key = np.full(sigs.shape[0], np.uint64(b), dtype=np.uint64)
        for r in range(rows):
            key = splitmix64(key ^ sigs[:, b * rows + r].astype(np.uint64))
        keys[:, b] = key
    return keys


def jaccard(a: U64, b: U64) -> float:
    """Exact Jaccard similarity of two shingle-hash sets."""
    ua, ub = np.unique(a), np.unique(b)
    inter = len(np.intersect1d(ua, ub, assume_unique=True))
    union = len(ua) + len(ub) - inter
    return inter / union if union else 1.0
