"""Fixtures for the data pipeline's tests: synthetic WARC files and the vendored crawl excerpt."""

import random
from collections.abc import Callable
from pathlib import Path

import pytest

from shipyard.data.warcpack import Page, write_warc

CRAWL = Path(__file__).resolve().parents[2] / "data" / "crawl"

WORDS = [
    "the",
    "be",
    "to",
    "of",
    "and",
    "that",
    "have",
    "with",
    "a",
    "in",
    "it",
    "for",
    "not",
    "on",
    "as",
    "you",
    "do",
    "at",
    "this",
    "but",
    "his",
    "by",
    "from",
    "they",
    "we",
    "say",
    "her",
    "she",
    "or",
    "an",
    "will",
    "my",
    "one",
    "all",
    "would",
    "there",
    "their",
    "what",
    "so",
    "up",
    "out",
    "if",
    "about",
    "who",
    "get",
    "which",
    "go",
    "me",
    "when",
    "make",
    "can",
    "like",
    "time",
    "no",
    "just",
    "him",
    "know",
    "take",
    "people",
    "into",
    "year",
    "your",
    "good",
    "some",
    "could",
    "them",
    "see",
    "other",
    "than",
    "then",
    "now",
    "look",
    "only",
    "come",
    "its",
    "over",
    "think",
    "also",
    "back",
    "after",
    "use",
    "two",
    "how",
    "our",
    "work",
    "first",
    "well",
    "way",
    "even",
    "new",
    "want",
    "because",
    "any",
    "these",
    "give",
    "day",
    "most",
    "us",
    "ship",
    "yard",
    "harbour",
    "crane",
    "vessel",
    "cargo",
    "river",
    "bridge",
    "engine",
    "sailor",
    "captain",
    "anchor",
    "rope",
    "timber",
    "deck",
    "hull",
    "mast",
    "storm",
    "tide",
    "weather",
    "morning",
    "evening",
    "market",
    "village",
    "city",
    "garden",
    "kitchen",
    "window",
    "library",
    "teacher",
    "student",
    "lesson",
    "history",
    "music",
    "painting",
    "language",
    "science",
    "number",
    "letter",
    "journey",
]


def english_text(seed: int, paragraphs: int = 4) -> str:
    """Random but well-formed English-like prose that passes the quality filters."""
    rng = random.Random(seed)
    out = []
    for _ in range(paragraphs):
        sentences = []
        for _ in range(rng.randint(4, 6)):
            words = [rng.choice(WORDS) for _ in range(rng.randint(9, 16))]
            sentences.append(" ".join(words).capitalize() + ".")
        out.append(" ".join(sentences))
    return "\n\n".join(out)


def html_page(text: str, title: str = "A page") -> bytes:
    body = "".join(f"<p>{p}</p>\n" for p in text.split("\n\n"))
    return (
        f"<!doctype html><html><head><title>{title}</title></head>"
        f"<body><main><h1>{title}</h1>\n{body}</main></body></html>"
    ).encode()


MakeWarc = Callable[..., Path]


@pytest.fixture
def make_warc(tmp_path: Path) -> MakeWarc:
    """Write a WARC file of pages (url, html bytes) or Page objects into tmp_path/crawl."""

    def make(name: str, pages: list[Page], compression: str = "gzip", crawl: str = "TEST") -> Path:
        folder = tmp_path / "crawl"
        folder.mkdir(exist_ok=True)
        path = folder / name
        write_warc(path, pages, compression, crawl)  # type: ignore[arg-type]
        return path

    return make


@pytest.fixture
def crawl_dir() -> Path:
    return CRAWL
