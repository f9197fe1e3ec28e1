"""The pipeline's typed configuration, loaded from TOML and validated at the edge.

Every section is a frozen dataclass with defaults; an unknown key, a wrong type or an out-of-range
value is rejected with an `InvalidInput` that names the section and field. `section_hash` gives
the per-stage config hash that incremental reprocessing keys on.
"""

import dataclasses
import math
import tomllib
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin, get_type_hints

from shipyard.errors import InvalidInput
from shipyard.hashing import canonical_json, sha256_hex


@dataclass(frozen=True)
class ReadConfig:
    url_blocklist: tuple[str, ...] = ()  # domains; a URL on one or its subdomains is dropped
    max_record_bytes: int = 8 << 20  # larger HTTP payloads go to quarantine unread
    content_types: tuple[str, ...] = ("text/html", "application/xhtml+xml")


@dataclass(frozen=True)
class ExtractConfig:
    engine: str = "resiliparse"  # a name registered in shipyard.data.stages.extract
    timeout_s: float = 5.0  # per record; a hang lands in quarantine
    main_content: bool = True


@dataclass(frozen=True)
class LangIdConfig:
    max_chars: int = 2000  # the model sees the first N characters of a document


@dataclass(frozen=True)
class FilterConfig:
    gopher_repetition: bool = True
    gopher_quality: bool = True
    c4: bool = True
    fineweb: bool = True
    timeout_s: float = 5.0  # per record; past it the record lands in quarantine


@dataclass(frozen=True)
class DedupConfig:
    ngram: int = 5
    bands: int = 14
    rows: int = 8
    seed: int = 1
    threshold: float = 0.75  # exact word n-gram Jaccard for two documents to share a cluster
    bucket_cap: int = 1000  # members beyond this in one LSH bucket get no edge from it
    partitions: int = 4  # edge shards for clustering


@dataclass(frozen=True)
class PiiConfig:
    email: bool = True
    phone: bool = True
    ip: bool = True
    timeout_s: float = 5.0  # per record; past it the record lands in quarantine


@dataclass(frozen=True)
class DecontamConfig:
    benchmarks: tuple[str, ...] = ()  # text files; one benchmark example per line
    ngram: int = 13
    timeout_s: float = 5.0  # per record; past it the record lands in quarantine


@dataclass(frozen=True)
class SelectConfig:
    where: str = (
        "keep_exact AND keep_minhash AND NOT contaminated AND gopher_repetition_ok"
        " AND gopher_quality_ok AND c4_ok AND fineweb_ok"
    )


@dataclass(frozen=True)
class TokenizeConfig:
    enabled: bool = True
    vocab_size: int = 8000
    shard_tokens: int = 1 << 22  # tokens per shard file, at most


@dataclass(frozen=True)
class ExecutorConfig:
    kind: Literal["local", "ray"] = "local"
    workers: int = 2
    task_timeout_s: float = 600.0
    max_retries: int = 2


@dataclass(frozen=True)
class PipelineConfig:
    name: str
    inputs: tuple[str, ...]  # WARC files, directories of them, or `artifact:REF`
    read: ReadConfig = field(default_factory=ReadConfig)
    extract: ExtractConfig = field(default_factory=ExtractConfig)
    langid: LangIdConfig = field(default_factory=LangIdConfig)
    filters: FilterConfig = field(default_factory=FilterConfig)
    dedup: DedupConfig = field(default_factory=DedupConfig)
    pii: PiiConfig = field(default_factory=PiiConfig)
    decontam: DecontamConfig = field(default_factory=DecontamConfig)
    select: SelectConfig = field(default_factory=SelectConfig)
    tokenize: TokenizeConfig = field(default_factory=TokenizeConfig)
    executor: ExecutorConfig = field(default_factory=ExecutorConfig)

    def __post_init__(self) -> None:
        _check(self.name != "" and "/" not in self.name, "name", "must be a non-empty word")
        _check(len(self.inputs) > 0, "inputs", "must name at least one WARC file or directory")
        _check(self.read.max_record_bytes > 0, "read.max_record_bytes", "must be positive")
        for section in ("extract", "filters", "pii", "decontam"):
            timeout = getattr(self, section).timeout_s
            _check(0 < timeout < math.inf, f"{section}.timeout_s", "must be positive and finite")
        _check(self.dedup.ngram >= 1, "dedup.ngram", "must be at least 1")
        _check(self.dedup.bands >= 1 and self.dedup.rows >= 1, "dedup.bands", "must be ≥ 1")
        _check(0 < self.dedup.threshold <= 1, "dedup.threshold", "must be in (0, 1]")
        _check(self.dedup.bucket_cap >= 2, "dedup.bucket_cap", "must be at least 2")
        _check(self.dedup.partitions >= 1, "dedup.partitions", "must be at least 1")
        _check(self.decontam.ngram >= 1, "decontam.ngram", "must be at least 1")
        _check(self.tokenize.vocab_size >= 300, "tokenize.vocab_size", "must be at least 300")
        _check(self.tokenize.shard_tokens >= 1024, "tokenize.shard_tokens", "must be ≥ 1024")
        _check(self.executor.workers >= 1, "executor.workers", "must be at least 1")
        _check(
            0 < self.executor.task_timeout_s < math.inf,
            "executor.task_timeout_s",
            "must be positive and finite",
        )
        _check(self.executor.max_retries >= 0, "executor.max_retries", "must be ≥ 0")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def section_hash(self, section: str, fields: tuple[str, ...] | None = None) -> str:
        """The hash of one section's values (or of `fields` of it): what a stage's cached
        output is keyed on."""
        values = dataclasses.asdict(getattr(self, section))
        if fields is not None:
            values = {name: values[name] for name in fields}
        return sha256_hex(canonical_json(values))[:16]

    def config_hash(self) -> str:
        """Hash of everything that decides the outputs (the executor does not)."""
        settings = self.to_dict()
        del settings["executor"]
        return sha256_hex(canonical_json(settings))


def _check(ok: bool, where: str, message: str) -> None:
    if not ok:
        raise InvalidInput(f"pipeline config: {where} {message}")


T = TypeVar("T")


def from_dict(cls: type[T], data: dict[str, Any], where: str = "") -> T:
    """Build dataclass `cls` from `data`, checking every key and value type."""
    if not isinstance(data, dict):
        raise InvalidInput(f"pipeline config: {where or 'top level'} must be a table")
    hints = get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - fields)
    if unknown:
        allowed = ", ".join(sorted(fields))
        raise InvalidInput(f"pipeline config: unknown key {where}{unknown[0]} (allowed: {allowed})")
    values = {key: _convert(hints[key], value, f"{where}{key}") for key, value in data.items()}
    try:
        return cls(**values)
    except TypeError as exc:
        raise InvalidInput(f"pipeline config {where or 'top level'}: {exc}") from None


def _convert(hint: Any, value: Any, where: str) -> Any:
    origin = get_origin(hint)
    if dataclasses.is_dataclass(hint):
        return from_dict(hint, value, where + ".")  # type: ignore[arg-type]
    if origin is Literal:
        allowed = get_args(hint)
        if value not in allowed:
            raise InvalidInput(f"pipeline config: {where} is {value!r}; allowed: {allowed}")
        return value
    if origin is tuple:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise InvalidInput(f"pipeline config: {where} must be a list of strings")
        return tuple(value)
    if origin is types.UnionType:
        hint = get_args(hint)[0]
    expected = (int, float) if hint is float else hint
    if not isinstance(value, expected) or (hint is not bool and isinstance(value, bool)):
        raise InvalidInput(f"pipeline config: {where} must be {hint.__name__}, not {value!r}")
    return float(value) if hint is float else value


def load_config(path: Path) -> PipelineConfig:
    """Read a TOML pipeline config; relative paths in it resolve against its folder."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidInput(f"pipeline config {path} does not exist") from None
    except OSError as exc:
        raise InvalidInput(f"pipeline config {path}: cannot read it: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"pipeline config {path}: not UTF-8 at byte {exc.start}") from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"pipeline config {path}: {exc}") from None
    base = path.resolve().parent
    if isinstance(data.get("inputs"), list):
        data["inputs"] = [_rebase(base, p) for p in data["inputs"]]
    decontam = data.get("decontam")
    if isinstance(decontam, dict) and isinstance(decontam.get("benchmarks"), list):
        decontam["benchmarks"] = [_rebase(base, p) for p in decontam["benchmarks"]]
    return from_dict(PipelineConfig, data)


def _rebase(base: Path, value: Any) -> Any:
    if not isinstance(value, str) or value.startswith("artifact:"):
        return value
    return str(base / Path(value).expanduser())
