"""Shipyard's word tokenizer (spaCy's English rules as data) against spaCy's own tokenizer:
how often they split a document the same way, and words per CPU-second of each.

This is the figure behind keeping the rules as data rather than depending on spaCy
(docs/data.md, "Words"). Pages are extracted with Shipyard's extract stage; each text is split by
`shipyard.data.words.tokens` and by `spacy.blank("en").tokenizer` (whitespace tokens left out,
as datatrove's `SpaCyTokenizer.word_tokenize` leaves them out). Both cache the pieces of each
distinct whitespace-separated chunk, so each is timed twice over the same documents in one
process: cold (first pass, empty cache) and warm (second pass); spaCy both inside a
`memory_zone` per text, as datatrove calls it (which empties its cache after each text), and
without one (its cache kept, its memory growing with every new chunk). CPU time is this process's
user + system time, so other load on a shared machine does not skew the rates.

Needs spaCy (`.venv/bin/pip install 'spacy>=3.8,<3.9'`; no model download: the blank English
pipeline is rules only).

Usage: .venv/bin/python benchmarks/data_words_spacy.py --warc DIR [--warc ...] [--docs 400]
"""

import argparse
import json
import random
import resource
import tempfile
from collections.abc import Callable
from pathlib import Path

from filter_agreement import extract_texts, warcs_of
from shipyard.data.words import tokens

Splitter = Callable[[str], list[str]]


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def timed(split: Splitter, texts: list[str]) -> tuple[list[list[str]], float]:
    start = cpu()
    out = [split(text) for text in texts]
    return out, cpu() - start


def spacy_splitter(memory_zone: bool) -> Splitter:
    import spacy

    nlp = spacy.blank("en")

    def split(text: str) -> list[str]:
        return [t.text for t in nlp.tokenizer(text) if not t.is_space]

    def split_in_zone(text: str) -> list[str]:
        # as datatrove does: spaCy frees what it learnt about the text's chunks after each text,
        # so its memory stays flat (and its chunk cache starts empty for every document)
        with nlp.memory_zone():
            return split(text)

    return split_in_zone if memory_zone else split


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warc", action="append", default=[], help="WARC file or folder")
    parser.add_argument("--html", action="append", default=[], help="folder of HTML pages")
    parser.add_argument("--docs", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        docs = extract_texts(warcs_of(args, Path(tmp)))
    random.Random(args.seed).shuffle(docs)
    texts = [text for _, text in docs[: args.docs]]
    ours, ours_cold = timed(tokens, texts)
    _, ours_warm = timed(tokens, texts)
    theirs, theirs_cold = timed(spacy_splitter(memory_zone=True), texts)
    _, theirs_warm = timed(spacy_splitter(memory_zone=True), texts)
    kept_split = spacy_splitter(memory_zone=False)
    _, kept_cold = timed(kept_split, texts)
    _, kept_warm = timed(kept_split, texts)
    n_words = sum(len(t) for t in theirs)
    differ = [i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b]
    for i in differ[:5]:
        a, b = ours[i], theirs[i]
        first = next(j for j in range(min(len(a), len(b)) + 1) if j >= len(a) or a[j] != b[j])
        print(f"differs: {docs[i][0]}  ours {a[first : first + 4]}  spaCy {b[first : first + 4]}")
    rate = {
        "ours_cold": n_words / ours_cold,
        "ours_warm": n_words / ours_warm,
        "spacy_cold": n_words / theirs_cold,
        "spacy_warm": n_words / theirs_warm,
        "spacy_cache_kept_cold": n_words / kept_cold,
        "spacy_cache_kept_warm": n_words / kept_warm,
    }
    for name, value in rate.items():
        print(f"{name:<22} {value / 1e6:6.2f} M words per CPU-second")
    result = {
        "name": "data_words_spacy",
        "value": round(rate["ours_cold"]),
        "unit": "words/CPU-s (cold cache)",
        "baseline": round(rate["spacy_cold"]),
        "ratio": round(rate["ours_cold"] / rate["spacy_cold"], 2),
        "warm": round(rate["ours_warm"]),
        "baseline_warm": round(rate["spacy_warm"]),
        "spacy_cache_kept_cold": round(rate["spacy_cache_kept_cold"]),
        "spacy_cache_kept_warm": round(rate["spacy_cache_kept_warm"]),
        "docs": len(texts),
        "words": n_words,
        "docs_identical": len(texts) - len(differ),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
