"""Gopher's repetition and quality rules (Rae et al. 2021, appendix A) with their thresholds.

Each check returns the name of the first rule a document breaks, or "" when it passes.
"""

from collections import Counter

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


def _top_ngram_chars(words: list[str], n: int) -> int:
    grams = Counter(zip(*(words[i:] for i in range(n)), strict=False))
    if not grams:
        return 0
    gram, count = grams.most_common(1)[0]
    return count * sum(len(w) for w in gram) if count > 1 else 0


def _dup_ngram_chars(words: list[str], n: int) -> int:
    """Characters of words covered by any n-gram that occurs more than once."""
    covered = [False] * len(words)
    first: dict[tuple[str, ...], int] = {}
    for i in range(len(words) - n + 1):
        gram = tuple(words[i : i + n])
        if gram in first:
            covered[first[gram] : first[gram] + n] = [True] * n
            covered[i : i + n] = [True] * n
        else:
            first[gram] = i
    return sum(len(w) for w, c in zip(words, covered, strict=True) if c)


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
    for n, limit in TOP_NGRAM_CHAR_FRAC:
        if _top_ngram_chars(words, n) > limit * word_chars:
            return f"top_{n}_gram"
    for n, limit in DUP_NGRAM_CHAR_FRAC:
        if _dup_ngram_chars(words, n) > limit * word_chars:
            return f"duplicated_{n}_grams"
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
