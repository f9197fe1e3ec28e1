from pathlib import Path

import pytest

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
