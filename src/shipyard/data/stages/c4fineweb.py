"""The C4 (Raffel et al. 2020) and FineWeb (Penedo et al. 2024) document rules, as datatrove
defines them, annotated.

C4 removes lines and then judges what is left; here the same line rules decide which lines would
remain and the document is judged on those, without changing its text.
"""

import re

from shipyard.data.words import TERMINAL_ENDINGS, sentence_count, tokens

C4_END = (".", "?", "!", '"', "'")
C4_MIN_WORDS_PER_LINE = 3
C4_MIN_SENTENCES = 5
C4_MAX_WORD_LENGTH = 1000
C4_POLICY = (
    "terms of use",
    "privacy policy",
    "cookie policy",
    "uses cookies",
    "use of cookies",
    "use cookies",
)
_CITATION = re.compile(r"\[\d*]|\[edit]|\[citation needed]")

FW_LINE_PUNCT_MIN = 0.12
FW_SHORT_LINE_LEN = 30
FW_SHORT_LINE_MAX = 0.67
FW_DUP_LINE_CHARS_MAX = 0.01
FW_NEWLINE_PER_WORD_MAX = 0.3


def c4(text: str) -> str:
    sentences = 0
    for line in text.splitlines():
        line = line.strip()
        words = line.split()
        if any(len(w) > C4_MAX_WORD_LENGTH for w in words):
            continue
        line = _CITATION.sub("", line)
        if not line.endswith(C4_END) or line.endswith("...") or len(words) < C4_MIN_WORDS_PER_LINE:
            continue
        low = line.lower()
        if "lorem ipsum" in low:
            return "lorem_ipsum"
        if "javascript" in low:
            continue
        if "{" in line:
            return "curly_bracket"
        if any(p in low for p in C4_POLICY):
            continue
        sentences += sentence_count(tokens(line))
    return "too_few_sentences" if sentences < C4_MIN_SENTENCES else ""


def fineweb(text: str, words: list[str]) -> str:
    lines = [line for line in text.split("\n") if line.strip()]
    if not lines:
        return "empty"
    if sum(line.endswith(TERMINAL_ENDINGS) for line in lines) < FW_LINE_PUNCT_MIN * len(lines):
        return "line_punct_ratio"
    if sum(len(line) <= FW_SHORT_LINE_LEN for line in lines) > FW_SHORT_LINE_MAX * len(lines):
        return "short_line_ratio"
    seen: set[str] = set()
    dup_chars = 0
    for line in lines:
        if line in seen:
            dup_chars += len(line)
        seen.add(line)
    if dup_chars > FW_DUP_LINE_CHARS_MAX * len(text.replace("\n", "")):
        return "char_dup_ratio"
    if text.count("\n") > FW_NEWLINE_PER_WORD_MAX * len(words):
        return "list_ratio"
    return ""
