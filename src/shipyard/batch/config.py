"""The settings of a backfill, validated at the edge: a bad field is named with what is allowed."""

from dataclasses import asdict, dataclass
from typing import Any

from shipyard.errors import InvalidInput

RUNTIMES = ("onnx", "onnx-int8", "sentence-transformers")
INDEX_KINDS = ("hnsw", "ivf", "flat")


def _int(name: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput(f"{name} must be an integer from {low} to {high}, not {value!r}")
    return value


@dataclass(frozen=True)
class ChunkPolicy:
    """Windows of `max_tokens` word pieces (plus [CLS] and [SEP]), each starting `max_tokens -
    overlap` after the last: a long document becomes several chunks, never a truncated one."""

    max_tokens: int = 128
    overlap: int = 16

    def __post_init__(self) -> None:
        _int("chunk max_tokens", self.max_tokens, 8, 8190)
        _int("chunk overlap", self.overlap, 0, self.max_tokens // 2)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> "ChunkPolicy":
        if not isinstance(data, dict) or set(data) - {"max_tokens", "overlap"}:
            raise InvalidInput(f"chunk policy: expected {{max_tokens, overlap}}, not {data!r}")
        return cls(**data)


@dataclass(frozen=True)
class EncodeConfig:
    """How a worker batches: chunks sorted by length, a batch holds at most `token_budget`
    padded tokens and `max_batch` chunks; documents are read and tokenized `block_docs` at a
    time on a second thread while the model runs."""

    runtime: str = "onnx"
    token_budget: int = 8192
    max_batch: int = 256
    block_docs: int = 256

    def __post_init__(self) -> None:
        if self.runtime not in RUNTIMES:
            raise InvalidInput(
                f"runtime must be one of {', '.join(RUNTIMES)}, not {self.runtime!r}"
            )
        _int("token_budget", self.token_budget, 16, 1 << 20)
        _int("max_batch", self.max_batch, 1, 4096)
        _int("block_docs", self.block_docs, 1, 100_000)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> "EncodeConfig":
        if not isinstance(data, dict) or set(data) - set(cls.__dataclass_fields__):
            raise InvalidInput(f"encode config: unexpected fields in {data!r}")
        return cls(**data)


@dataclass(frozen=True)
class IndexConfig:
    """The serving index and the gate it must pass: recall@10 against exact (flat) search on
    `queries` held-out query vectors must reach `min_recall` before an alias may point at it."""

    kind: str = "hnsw"
    hnsw_m: int = 32
    ef_construction: int = 80
    ef_search: int = 128
    ivf_lists: int = 0  # 0: about 4·sqrt(vectors)
    ivf_probe: int = 16
    queries: int = 500
    min_recall: float = 0.95
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in INDEX_KINDS:
            raise InvalidInput(
                f"index kind must be one of {', '.join(INDEX_KINDS)}, not {self.kind!r}"
            )
        _int("hnsw_m", self.hnsw_m, 2, 256)
        _int("ef_construction", self.ef_construction, 1, 4096)
        _int("ef_search", self.ef_search, 1, 4096)
        _int("ivf_lists", self.ivf_lists, 0, 1 << 20)
        _int("ivf_probe", self.ivf_probe, 1, 1 << 20)
        _int("queries", self.queries, 1, 100_000)
        if not isinstance(self.min_recall, (int, float)) or not 0.0 <= self.min_recall <= 1.0:
            raise InvalidInput(f"min_recall must be from 0 to 1, not {self.min_recall!r}")
