"""Extract the main text of each HTML page (resiliparse by default, trafilatura as an option).

Bytes are decoded with the detected encoding; a page whose bytes mostly fail to decode goes to
quarantine rather than into the corpus as mojibake. Records are extracted in a worker process
that is killed and replaced when one takes longer than `extract.timeout_s` or crashes it, so a
page that keeps the extractor busy in native code costs that page ("timeout after 5s in
extract"), not the task.
"""

import codecs
from collections.abc import Callable
from typing import ClassVar

from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.encoding import detect_encoding
from resiliparse.parse.html import HTMLTree

from shipyard.data.batch import Batch, Quarantine, guarded_map, keep_rows
from shipyard.data.config import PipelineConfig
from shipyard.data.stages.base import Stage, register
from shipyard.errors import InvalidInput

Extractor = Callable[[str, bool], str]  # (decoded html, main content only) → text

MAX_INVALID_FRACTION = 0.01


def _resiliparse(html: str, main_content: bool) -> str:
    return str(extract_plain_text(HTMLTree.parse(html), main_content=main_content))


def _trafilatura(html: str, main_content: bool) -> str:
    import trafilatura

    return str(trafilatura.extract(html, include_comments=not main_content) or "")


EXTRACTORS: dict[str, Extractor] = {"resiliparse": _resiliparse, "trafilatura": _trafilatura}


def register_extractor(name: str, fn: Extractor) -> None:
    EXTRACTORS[name] = fn


class UndecodableError(ValueError):
    """A page whose bytes do not decode to text in any plausible encoding."""


def decode_html(raw: bytes) -> str:
    """Decode with the detected encoding; refuse bytes that are mostly not text in it."""
    encoding = detect_encoding(raw) or "utf-8"
    try:
        codecs.lookup(encoding)
    except LookupError:
        encoding = "utf-8"
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError:
        text = raw.decode(encoding, errors="replace")
    invalid = text.count("\ufffd")
    if b"\x00" in raw or invalid > MAX_INVALID_FRACTION * max(len(text), 1):
        raise UndecodableError(f"undecodable: {invalid} of {len(text)} characters invalid")
    return text


@register
class Extract(Stage):
    name: ClassVar[str] = "extract"
    version: ClassVar[str] = "2"
    section: ClassVar[str] = "extract"

    def __init__(self, config: PipelineConfig) -> None:
        self.config = config.extract
        if self.config.engine not in EXTRACTORS:
            known = ", ".join(sorted(EXTRACTORS))
            raise InvalidInput(f"extract.engine {self.config.engine!r} is not one of: {known}")
        self.extractor = EXTRACTORS[self.config.engine]

    def process(self, batch: Batch, quarantine: Quarantine) -> Batch:
        html = batch.pop("html")
        main = self.config.main_content

        def one(i: int) -> str:
            return self.extractor(decode_html(html[i]), main)

        kept, texts = guarded_map(batch, self.name, quarantine, one, self.config.timeout_s)
        out = keep_rows(batch, kept)
        out["text"] = [t.strip() for t in texts]
        return out
