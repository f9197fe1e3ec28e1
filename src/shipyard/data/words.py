"""Word splitting for every filter (the reference's, spaCy's) and for dedup, in one place.

datatrove (the reference for the Gopher, C4 and FineWeb filters) splits English text with spaCy's
rule-based tokenizer, and so does `tokens`, with spaCy's own English rules as data
(`english_rules`): the text is split at whitespace; each piece loses its prefixes (opening
brackets, quotes, currency signs) and suffixes (closing punctuation, "'s", units after numbers)
one at a time, unless what is left is a special case ("don't" → "do" "n't", "e.g.", "Mr.", ":)")
or a URL; what remains is split at infixes (hyphens between letters, "..." and the like). The
pieces of a whitespace-separated chunk are cached, so a chunk seen before costs one dict lookup:
web text repeats its words, and the rules run once per distinct chunk rather than per word.

`words` is what MinHash and exact dedup hash: the runs of letters, digits and `_` of the
NFKC-normalized, lowercased text (Python's `\\w+`, found by Arrow's kernels).
"""

import re
import unicodedata

import pyarrow as pa
import pyarrow.compute as pc

from shipyard.data import english_rules

_PREFIX = re.compile(english_rules.PREFIX).search
_SUFFIX = re.compile(english_rules.SUFFIX).search
_INFIX = re.compile(english_rules.INFIX).finditer
_URL = re.compile(english_rules.URL).match
_SPECIAL = english_rules.SPECIAL
_LONGEST_SPECIAL = max(map(len, _SPECIAL))
_NON_WORD = r"[^\p{L}\p{N}_]+"  # RE2 syntax; Python's `\W` up to combining marks
_CACHE_LIMIT = 1 << 19  # distinct chunks remembered per process before the cache starts over
_cache: dict[str, tuple[str, ...]] = {}


# Sentence-ending characters (Unicode's Sentence_Terminal, as datatrove's TERMINAL_PUNCTUATION).
TERMINAL = frozenset(
    "!.?\u0589\u061d\u061e\u061f\u06d4\u0700\u0701\u0702\u07f9\u0837\u0839\u083d\u083e\u0964"
    "\u0965\u104a\u104b\u1362\u1367\u1368\u166e\u1735\u1736\u17d4\u17d5\u17d6\u17d9\u17da"
    "\u1803\u1809\u1944\u1945\u1aa8\u1aa9\u1aaa\u1aab\u1b5a\u1b5b\u1b5e\u1b5f\u1b7d\u1b7e"
    "\u1c3b\u1c3c\u1c7e\u1c7f\u203c\u203d\u2047\u2048\u2049\u2e2e\u2e3c\u2e53\u2e54\u3002"
    "\ua4ff\ua60e\ua60f\ua6f3\ua6f7\ua876\ua877\ua8ce\ua8cf\ua92f\ua9c8\ua9c9\uaa5d\uaa5e"
    "\uaa5f\uaaf0\uaaf1\uabeb\ufe52\ufe56\ufe57\uff01\uff0e\uff1f\uff61\U00010a56\U00010a57"
    "\U00010f55\U00010f56\U00010f57\U00010f58\U00010f59\U00010f86\U00010f87\U00010f88"
    "\U00010f89\U00011047\U00011048\U000110be\U000110bf\U000110c0\U000110c1\U00011141"
    "\U00011142\U00011143\U000111c5\U000111c6\U000111cd\U000111de\U000111df\U00011238"
    "\U00011239\U0001123b\U0001123c\U000112a9\U0001144b\U0001144c\U000115c2\U000115c3"
    "\U000115c9\U000115ca\U000115cb\U000115cc\U000115cd\U000115ce\U000115cf\U000115d0"
    "\U000115d1\U000115d2\U000115d3\U000115d4\U000115d5\U000115d6\U000115d7\U00011641"
    "\U00011642\U0001173c\U0001173d\U0001173e\U00011944\U00011946\U00011a42\U00011a43"
    "\U00011a9b\U00011a9c\U00011c41\U00011c42\U00011ef7\U00011ef8\U00011f43\U00011f44"
    "\U00016a6e\U00016a6f\U00016af5\U00016b37\U00016b38\U00016b44\U00016e98\U0001bc9f"
    "\U0001da88"
)
TERMINAL_ENDINGS = tuple(TERMINAL)

# A token made only of these is a symbol, not a word (datatrove's PUNCTUATION_SET).
SYMBOLS = (
    frozenset(
        "!/\u2014\u201d:\uff05\uff11\u3008&(\u3001\u2501\\\u3010#%\u300c\u300d\uff0c\u3011\uff1b+^]~"
        "\u201c\u300a\u201e';\u2019{|\u2236\xb4[=-`*\uff0e\uff08\u2013\uff1f\uff01\uff1a$\uff5e\xab"
        '\u3009,><\u300b)?\uff09\u3002\u2026@_."}\u25ba\xbb'
    )
    | TERMINAL
    | frozenset(chr(c) for c in (*range(0, 32), *range(127, 160)))
)


def tokens(text: str) -> list[str]:
    """The text's words and punctuation tokens, in order, as spaCy's English tokenizer gives
    them (whitespace tokens left out, as datatrove strips them)."""
    cache = _cache
    if len(cache) > _CACHE_LIMIT:
        cache.clear()
    out: list[str] = []
    for chunk in text.split():
        pieces = cache.get(chunk)
        if pieces is None:
            pieces = cache[chunk] = _split(chunk)
        out += pieces
    return out


def _split(chunk: str) -> tuple[str, ...]:
    """spaCy's `Tokenizer._split_affixes` and `_attach_tokens` for one whitespace-free chunk."""
    special = _SPECIAL.get(chunk)
    if special is not None:
        return special
    prefixes: list[str] = []
    suffixes: list[str] = []
    s, last = chunk, -1
    while s and len(s) != last:
        if s in _SPECIAL:
            break
        last = len(s)
        match = _PREFIX(s)
        pre = match.end() - match.start() if match else 0
        if pre and s[pre:] in _SPECIAL:
            prefixes.append(s[:pre])
            s = s[pre:]
            break
        match = _SUFFIX(s[pre:])
        suf = match.end() - match.start() if match else 0
        if suf and s[:-suf] in _SPECIAL:
            suffixes.append(s[-suf:])
            s = s[:-suf]
            break
        if pre and suf and pre + suf <= len(s):
            prefixes.append(s[:pre])
            suffixes.append(s[-suf:])
            s = s[pre:-suf]
        elif pre:
            prefixes.append(s[:pre])
            s = s[pre:]
        elif suf:
            suffixes.append(s[-suf:])
            s = s[:-suf]
        if s in _SPECIAL:
            break
    return _merge_specials((*prefixes, *_middle(s), *reversed(suffixes)))


def _merge_specials(pieces: tuple[str, ...]) -> tuple[str, ...]:
    """Pieces that together spell a special case become it (spaCy matches special cases across
    affix splits too: ")" ":" → "):")."""
    if len(pieces) < 2:
        return pieces
    out: list[str] = []
    i = 0
    while i < len(pieces):
        # only spans short enough to spell a special case: a chunk of thousands of pieces (a run
        # of "(((…") stays linear here instead of joining every span of it
        end, width = i, 0
        while end < len(pieces) and width + len(pieces[end]) <= _LONGEST_SPECIAL:
            width += len(pieces[end])
            end += 1
        for j in range(end, i + 1, -1):
            special = _SPECIAL.get("".join(pieces[i:j]))
            if special is not None:
                out += special
                i = j
                break
        else:
            out.append(pieces[i])
            i += 1
    return tuple(out)


def _middle(s: str) -> tuple[str, ...]:
    if not s:
        return ()
    special = _SPECIAL.get(s)
    if special is not None:
        return special
    if _URL(s):
        return (s,)
    out: list[str] = []
    start = 0
    for match in _INFIX(s):
        if match.start() == 0:
            continue
        if match.start() != start:
            out.append(s[start : match.start()])
        if match.start() != match.end():
            out.append(s[match.start() : match.end()])
        start = match.end()
    if s[start:]:
        out.append(s[start:])
    return tuple(out)


def is_symbol(token: str) -> bool:
    return all(c in SYMBOLS for c in token)


def words(text: str) -> list[str]:
    """The words dedup hashes: runs of word characters of the normalized text.

    Not `tokens`: spaCy's rules keep code, paths and URLs whole (`os.path.join(a`), so a page
    and its copy with different punctuation would share few shingles; word-level similarity is
    what near-duplicate detection is judged by.
    """
    return [w for w in word_lists([text])[0].as_py() if w]


def word_lists(texts: list[str]) -> pa.ListArray:
    """`words` of many texts at once, in Arrow's C++ kernels: NFKC, lowercase, split at runs of
    characters that are not letters, digits or `_` (empty strings may remain: drop them)."""
    normalized = pc.utf8_lower(pc.utf8_normalize(pa.array(texts, pa.large_string()), "NFKC"))
    return pc.split_pattern_regex(normalized, _NON_WORD)


def sentence_count(toks: list[str]) -> int:
    """Sentences as spaCy's sentencizer splits them: a new one starts at the first token that is
    not punctuation after a sentence-ending character."""
    count, seen_end = 1, False
    for token in toks:
        if token in TERMINAL:
            seen_end = True
        elif seen_end and not is_punct(token):
            count += 1
            seen_end = False
    return count


def is_punct(token: str) -> bool:
    return all(unicodedata.category(c).startswith("P") for c in token)
