import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shipyard.data.config import PipelineConfig, load_config
from shipyard.errors import InvalidInput


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pipeline.toml"
    path.write_text(text)
    return path


def test_loads_sections_and_rebases_relative_paths(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        'name = "x"\ninputs = ["crawl", "artifact:abcd"]\n'
        '[dedup]\nthreshold = 0.8\nbands = 10\n[decontam]\nbenchmarks = ["bench.txt"]\n'
        '[executor]\nkind = "ray"\nworkers = 3\n',
    )
    config = load_config(path)
    assert config.inputs == (str(tmp_path / "crawl"), "artifact:abcd")
    assert config.dedup.threshold == 0.8 and config.dedup.bands == 10 and config.dedup.rows == 8
    assert config.decontam.benchmarks == (str(tmp_path / "bench.txt"),)
    assert config.executor.kind == "ray" and config.executor.workers == 3


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('name = "x"\ninputs = ["a"]\n[dedup]\nthreshhold = 0.5\n', "unknown key dedup.threshhold"),
        ('name = "x"\ninputs = ["a"]\n[dedup]\nbands = "14"\n', "dedup.bands must be int"),
        ('name = "x"\ninputs = ["a"]\n[executor]\nkind = "spark"\n', "executor.kind is 'spark'"),
        ('name = "x"\ninputs = []\n', "inputs must name at least one"),
        ('name = "x"\ninputs = ["a"]\n[dedup]\nthreshold = 1.5\n', "dedup.threshold"),
        ('name = "x"\ninputs = ["a"]\n[filters]\nc4 = 1\n', "filters.c4 must be bool"),
        ("name = \n", "pipeline config"),
    ],
)
def test_rejects_bad_config_naming_the_field(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message.replace(".", r"\.").replace("(", r"\(")):
        load_config(write(tmp_path, text))


def test_section_hash_changes_only_with_its_section() -> None:
    a = PipelineConfig("x", ("a",))
    b = PipelineConfig("x", ("b",))
    assert a.section_hash("filters") == b.section_hash("filters")
    assert a.config_hash() != b.config_hash()


def test_missing_file_is_invalid_input(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="does not exist"):
        load_config(tmp_path / "nope.toml")


SECTIONS = {
    "read": ["url_blocklist", "max_record_bytes", "content_types"],
    "extract": ["engine", "timeout_s", "main_content"],
    "langid": ["max_chars"],
    "filters": ["gopher_repetition", "gopher_quality", "c4", "fineweb", "timeout_s"],
    "dedup": ["ngram", "bands", "rows", "seed", "threshold", "bucket_cap", "partitions"],
    "pii": ["email", "phone", "ip", "timeout_s"],
    "decontam": ["benchmarks", "ngram", "timeout_s"],
    "select": ["where"],
    "tokenize": ["enabled", "vocab_size", "shard_tokens"],
    "executor": ["kind", "workers", "task_timeout_s", "max_retries"],
}
SCALARS = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(["local", "ray", "resiliparse", "x"]),
)
VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=3))


def toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return {"nan": "nan", "inf": "inf", "-inf": "-inf"}.get(str(value), repr(value))
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(value) if isinstance(value, str) else str(value)


@st.composite
def config_texts(draw: st.DrawFn) -> str:
    lines = [f"name = {toml_value(draw(st.sampled_from(['t', '', 'a/b', 'x'])))}"]
    lines.append(f"inputs = {toml_value(draw(st.lists(st.text(max_size=4), max_size=2)))}")
    for section in draw(st.lists(st.sampled_from(sorted(SECTIONS)), unique=True, max_size=4)):
        lines.append(f"[{section}]")
        keys = st.sampled_from(SECTIONS[section]) | st.text(min_size=1, max_size=4)
        for key in draw(st.lists(keys, unique=True, max_size=3)):
            lines.append(f"{json.dumps(key)} = {toml_value(draw(VALUES))}")
    text = "\n".join(lines) + "\n"
    if draw(st.booleans()):  # damage: cut it short, or splice in arbitrary characters
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.text(max_size=6))
    return text


@pytest.mark.fuzz
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=config_texts(), raw=st.binary(max_size=40) | st.none())
def test_config_parser_lets_only_invalid_input_escape(
    tmp_path_factory: pytest.TempPathFactory, text: str, raw: bytes | None
) -> None:
    path = tmp_path_factory.mktemp("cfg") / "pipeline.toml"
    path.write_bytes(text.encode("utf-8", "surrogatepass") + (raw or b""))
    try:
        config = load_config(path)
    except InvalidInput:
        return
    for section in ("extract", "filters", "pii", "decontam"):
        assert 0 < getattr(config, section).timeout_s < math.inf
    assert 0 < config.executor.task_timeout_s < math.inf
