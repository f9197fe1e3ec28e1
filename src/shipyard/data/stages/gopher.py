"""Gopher's repetition and quality rules (Rae et al. 2021, appendix A) as datatrove defines them.

Each check returns the reason datatrove gives for the first rule a document breaks, or "" when it
passes. Words are `shipyard.data.words.tokens`: punctuation tokens count as words that are not
alphabetic, as in the reference. Repeated n-grams are found over integer n-gram ids (numpy), not
joined strings.
"""

import re
from collections.abc import Iterator

import numpy as np

from shipyard.data.minhash import U64, splitmix64
from shipyard.data.words import is_symbol

DUP_LINE_FRAC = 0.30
DUP_PARA_FRAC = 0.30
DUP_LINE_CHAR_FRAC = 0.20
DUP_PARA_CHAR_FRAC = 0.20
TOP_NGRAM_CHAR_FRAC = ((2, 0.20), (3, 0.18), (4, 0.16))
DUP_NGRAM_CHAR_FRAC = ((5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10))

MIN_WORDS, MAX_WORDS = 50, 100_000
MIN_MEAN_WORD_LEN, MAX_MEAN_WORD_LEN = 3, 10
MAX_SYMBOL_WORD_RATIO = 0.1
MAX_BULLET_LINES = 0.9
MAX_ELLIPSIS_LINES = 0.3
MIN_ALPHA_WORDS = 0.8
MIN_STOP_WORDS = 2
STOP_WORDS = frozenset(("the", "be", "to", "of", "and", "that", "have", "with"))

_PARAGRAPHS = re.compile(r"\n{2,}")
_LINES = re.compile(r"\n+")


def _duplicates(items: list[str]) -> tuple[int, int]:
    """(count, characters) of items that repeat an earlier item."""
    seen: set[str] = set()
    count = chars = 0
    for item in items:
        if item in seen:
            count += 1
            chars += len(item)
        else:
            seen.add(item)
    return count, chars


def _gram_ids(ids: U64, n: int) -> U64:
    """One 64-bit id per word n-gram (position i covers words i..i+n-1)."""
    count = len(ids) - n + 1
    h = splitmix64(ids[:count].copy())
    for j in range(1, n):
        h = splitmix64(h ^ ids[j : j + count])
    return h


def _greedy_duplicate_chars(grams: U64, gram_chars: list[int], n: int) -> int:
    """Characters in repeated n-grams, counted as the reference does: scanning left to right,
    a repeat of an n-gram seen before counts once and the scan jumps past it."""
    _, first, inverse = np.unique(grams, return_index=True, return_inverse=True)
    repeats = np.flatnonzero(first[inverse] < np.arange(len(grams)))
    if len(repeats) == 0:
        return 0
    start = int(repeats[0])  # everything before the first repeat is scanned one by one
    seen = set(inverse[:start].tolist())
    ids = inverse.tolist()
    chars, i = 0, start
    while i < len(ids):
        if ids[i] in seen:
            chars += gram_chars[i]
            i += n
        else:
            seen.add(ids[i])
            i += 1
    return chars


def _ngram_scores(words: list[str]) -> Iterator[tuple[str, int, float]]:
    """(reason, characters involved, limit) for each top-n-gram and duplicated-n-gram rule."""
    vocab: dict[str, int] = {}
    ids = np.fromiter((vocab.setdefault(w, len(vocab) + 1) for w in words), np.uint64, len(words))
    prefix = np.concatenate([[0], np.cumsum([len(w) for w in words], dtype=np.int64)])
    for n, limit in TOP_NGRAM_CHAR_FRAC:
        if len(words) < n:
            continue
        grams = _gram_ids(ids, n)
        _, first, counts = np.unique(grams, return_index=True, return_counts=True)
        # the most frequent n-gram; among ties, the one that occurs first
        top = np.flatnonzero(counts == counts.max())
        at = int(first[top].min())
        chars = int(prefix[at + n] - prefix[at]) + n - 1  # joined with spaces
        yield f"top_{n}_gram", chars * int(counts.max()), limit
    for n, limit in DUP_NGRAM_CHAR_FRAC:
        if len(words) < n:
            continue
        grams = _gram_ids(ids, n)
        gram_chars = (prefix[n:] - prefix[:-n]).tolist()
        yield f"duplicated_{n}_n_grams", _greedy_duplicate_chars(grams, gram_chars, n), limit


def repetition(text: str, words: list[str]) -> str:
    if not text:
        return "empty"
    paragraphs = _PARAGRAPHS.split(text.strip())
    n_paras, para_chars = _duplicates(paragraphs)
    if n_paras > DUP_PARA_FRAC * len(paragraphs):
        return "dup_para_frac"
    if para_chars > DUP_PARA_CHAR_FRAC * len(text):
        return "dup_para_char_frac"
    lines = _LINES.split(text)
    n_lines, line_chars = _duplicates(lines)
    if n_lines > DUP_LINE_FRAC * len(lines):
        return "dup_line_frac"
    if line_chars > DUP_LINE_CHAR_FRAC * len(text):
        return "dup_line_char_frac"
    for reason, chars, limit in _ngram_scores(words):
        if chars > limit * len(text):
            return reason
    return ""


def quality(text: str, words: list[str]) -> str:
    lengths = [len(w) for w in words if not is_symbol(w)]
    if len(lengths) < MIN_WORDS:
        return "gopher_short_doc"
    if len(lengths) > MAX_WORDS:
        return "gopher_long_doc"
    mean_len = sum(lengths) / len(lengths)
    if mean_len < MIN_MEAN_WORD_LEN:
        return "gopher_below_avg_threshold"
    if mean_len > MAX_MEAN_WORD_LEN:
        return "gopher_above_avg_threshold"
    if text.count("#") > MAX_SYMBOL_WORD_RATIO * len(words):
        return "gopher_too_many_hashes"
    if text.count("...") + text.count("…") > MAX_SYMBOL_WORD_RATIO * len(words):
        return "gopher_too_many_ellipsis"
    lines = text.splitlines()
    bullets = sum(line.lstrip().startswith(("•", "-")) for line in lines)
    if bullets > MAX_BULLET_LINES * len(lines):
        return "gopher_too_many_bullets"
    ellipsis = sum(line.rstrip().endswith(("...", "…")) for line in lines)
    if ellipsis > MAX_ELLIPSIS_LINES * len(lines):
        return "gopher_too_many_end_ellipsis"
    if sum(any(c.isalpha() for c in w) for w in words) < MIN_ALPHA_WORDS * len(words):
        return "gopher_below_alpha_threshold"
    if len(STOP_WORDS.intersection(words)) < MIN_STOP_WORDS:
        return "gopher_enough_stop_words"
    return ""
