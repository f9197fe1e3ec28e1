"""Gopher's repetition and quality rules (Rae et al. 2021, appendix A) with their thresholds.

Each check returns the name of the first rule a document breaks, or "" when it passes.
"""

from collections.abc import Iterator

import numpy as np

from shipyard.data.minhash import U64, splitmix64

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
BULLETS = ("•", "●", "○", "■", "□", "▪", "▫", "*", "-", "–", "‣")


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


def _ngram_scores(words: list[str]) -> Iterator[tuple[str, int, float]]:
    """(rule, characters involved, limit) for each top-n-gram and duplicated-n-gram rule, as
    array operations over n-gram ids rather than Python tuples."""
    vocab: dict[str, int] = {}
    ids = np.fromiter((vocab.setdefault(w, len(vocab) + 1) for w in words), np.uint64, len(words))
    lengths = np.fromiter((len(w) for w in words), np.int64, len(words))
    prefix = np.concatenate([[0], np.cumsum(lengths)])
    for n, limit in TOP_NGRAM_CHAR_FRAC:
        if len(words) < n:
            continue
        grams = _gram_ids(ids, n)
        _, first, counts = np.unique(grams, return_index=True, return_counts=True)
        top = int(np.argmax(counts))
        chars = int(prefix[first[top] + n] - prefix[first[top]]) if counts[top] > 1 else 0
        yield f"top_{n}_gram", chars * int(counts[top]), limit
    for n, limit in DUP_NGRAM_CHAR_FRAC:
        if len(words) < n:
            continue
        grams = _gram_ids(ids, n)
        _, inverse, counts = np.unique(grams, return_inverse=True, return_counts=True)
        starts = np.flatnonzero(counts[inverse] > 1)
        cover = np.zeros(len(words) + 1, dtype=np.int64)
        np.add.at(cover, starts, 1)
        np.add.at(cover, starts + n, -1)
        covered = np.cumsum(cover[:-1]) > 0
        yield f"duplicated_{n}_grams", int(lengths[covered].sum()), limit


def repetition(text: str, words: list[str]) -> str:
    lines = [line for line in text.split("\n") if line.strip()]
    paragraphs = [p for p in text.split("\n\n") if p.strip()]
    total = max(len(text), 1)
    n_lines, line_chars = _duplicates(lines)
    n_paras, para_chars = _duplicates(paragraphs)
    if n_paras > DUP_PARA_FRAC * max(len(paragraphs), 1):
        return "dup_para_frac"
    if para_chars > DUP_PARA_CHAR_FRAC * total:
        return "dup_para_char_frac"
    if n_lines > DUP_LINE_FRAC * max(len(lines), 1):
        return "dup_line_frac"
    if line_chars > DUP_LINE_CHAR_FRAC * total:
        return "dup_line_char_frac"
    word_chars = max(sum(len(w) for w in words), 1)
    for rule, chars, limit in _ngram_scores(words):
        if chars > limit * word_chars:
            return rule
    return ""


def quality(text: str, words: list[str]) -> str:
    if not MIN_WORDS <= len(words) <= MAX_WORDS:
        return "word_count"
    mean_len = sum(len(w) for w in words) / len(words)
    if not MIN_MEAN_WORD_LEN <= mean_len <= MAX_MEAN_WORD_LEN:
        return "mean_word_length"
    symbols = text.count("#") + text.count("...") + text.count("…")
    if symbols > MAX_SYMBOL_WORD_RATIO * len(words):
        return "symbol_word_ratio"
    lines = [line.strip() for line in text.split("\n") if line.strip()]
    if lines and sum(line.startswith(BULLETS) for line in lines) > MAX_BULLET_LINES * len(lines):
        return "bullet_lines"
    ellipsis = sum(line.endswith(("...", "…")) for line in lines)
    if lines and ellipsis > MAX_ELLIPSIS_LINES * len(lines):
        return "ellipsis_lines"
    if sum(any(c.isalpha() for c in w) for w in words) < MIN_ALPHA_WORDS * len(words):
        return "alpha_words"
    if sum(w.lower() in STOP_WORDS for w in words) < MIN_STOP_WORDS:
        return "stop_words"
    return ""
