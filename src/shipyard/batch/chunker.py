"""Documents into model-sized chunks of token ids, covering every token: never truncated."""

from dataclasses import dataclass, field

from tokenizers import Tokenizer

from shipyard.batch.config import ChunkPolicy
from shipyard.batch.snapshot import Doc
from shipyard.errors import InvalidInput


@dataclass
class ChunkStats:
    docs: int = 0
    chunks: int = 0
    tokens: int = 0
    empty: int = 0
    non_utf8: int = 0
    long_docs: int = 0  # longer than one window: split into several chunks
    deleted: int = 0

    def add(self, other: "ChunkStats") -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def to_json(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass
class Chunked:
    """The chunks of a block of documents, in document order."""

    doc_ids: list[str] = field(default_factory=list)
    chunk_ids: list[int] = field(default_factory=list)
    ids: list[list[int]] = field(default_factory=list)  # [CLS] window [SEP]
    stats: ChunkStats = field(default_factory=ChunkStats)


class Chunker:
    def __init__(self, tokenizer: Tokenizer, policy: ChunkPolicy, window: int) -> None:
        if policy.max_tokens + 2 > window:
            raise InvalidInput(
                f"chunk max_tokens {policy.max_tokens} + 2 special tokens exceeds the model's "
                f"window of {window} tokens"
            )
        self.policy = policy
        self.tokenizer = Tokenizer.from_str(tokenizer.to_str())
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        cls_id = self.tokenizer.token_to_id("[CLS]")
        sep_id = self.tokenizer.token_to_id("[SEP]")
        if cls_id is None or sep_id is None:
            raise InvalidInput("tokenizer has no [CLS]/[SEP] tokens: not a BERT-style encoder")
        self.cls, self.sep = cls_id, sep_id

    def windows(self, ids: list[int]) -> list[list[int]]:
        """`ids` in overlapping windows; the last window ends at the last token."""
        size, step = self.policy.max_tokens, self.policy.max_tokens - self.policy.overlap
        out = []
        start = 0
        while True:
            out.append([self.cls, *ids[start : start + size], self.sep])
            if start + size >= len(ids):
                return out
            start += step

    def chunk(self, docs: list[Doc]) -> Chunked:
        result = Chunked()
        stats = result.stats
        live = []
        for doc in docs:
            stats.docs += 1
            if doc.op == "delete":
                stats.deleted += 1
            elif doc.problem == "non_utf8":
                stats.non_utf8 += 1
            elif doc.problem or doc.text is None:
                stats.empty += 1
            else:
                live.append(doc)
        encoded = self.tokenizer.encode_batch(
            [doc.text or "" for doc in live], add_special_tokens=False
        )
        for doc, enc in zip(live, encoded, strict=True):
            ids = enc.ids
            if not ids:  # text that tokenizes to nothing (control characters alone)
                stats.empty += 1
                continue
            if len(ids) > self.policy.max_tokens:
                stats.long_docs += 1
            stats.tokens += len(ids)
            for n, window in enumerate(self.windows(ids)):
                result.doc_ids.append(doc.doc_id)
                result.chunk_ids.append(n)
                result.ids.append(window)
        stats.chunks = len(result.ids)
        return result
