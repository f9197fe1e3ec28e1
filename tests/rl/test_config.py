"""The RL config: typed, validated at the edge, refused by field name; parsers fuzzed."""

import contextlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shipyard.errors import InvalidInput
from shipyard.rl import RLConfig, load_config


def test_yaml_and_json_load_to_the_same_config(tmp_path: Path) -> None:
    raw = {"name": "x", "trainer": {"eta": 2, "lr": 1}, "task": {"operators": ["+"]}}
    yaml_text = "name: x\ntrainer: {eta: 2, lr: 1}\ntask: {operators: ['+']}\n"
    (tmp_path / "a.yaml").write_text(yaml_text)
    (tmp_path / "a.json").write_text(json.dumps(raw))
    a, b = load_config(tmp_path / "a.yaml"), load_config(tmp_path / "a.json")
    assert a == b
    assert a.trainer.eta == 2 and a.trainer.lr == 1.0 and a.task.operators == ("+",)
    small = RLConfig.from_dict({"model": {"d_model": 32, "n_heads": 2}}).model
    assert (small.vocab_size, small.d_model, small.seq_len) == (98, 32, 64)


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ({"trainer": {"eta": -1}}, "trainer.eta"),
        ({"trainer": {"etaa": 1}}, "trainer.etaa is unknown"),
        ({"rollout": {"workers": "2"}}, "rollout.workers must be an integer"),
        ({"sync": "nfs"}, "sync must be one of"),
        ({"task": {"env": "chess"}}, "task.env must be one of"),
        ({"model": {"vocab_size": 10}}, "model.vocab_size"),
        ({"bogus": {}}, "unknown keys ['bogus']"),
        ({"seed": True}, "seed must be int"),
        ({"model": {"seq_len": 12}, "task": {"think_max": 8}}, "model.seq_len must be >= 19"),
    ],
)
def test_a_bad_field_is_named(raw: dict[str, object], named: str) -> None:
    with pytest.raises(InvalidInput, match=named.replace("[", r"\[").replace("]", r"\]")):
        RLConfig.from_dict(raw)


def test_unreadable_or_malformed_files_are_invalid_input(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    (tmp_path / "bad.yaml").write_text("trainer: [unclosed")
    with pytest.raises(InvalidInput, match="not valid yaml"):
        load_config(tmp_path / "bad.yaml")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(InvalidInput, match="mapping"):
        load_config(tmp_path / "list.json")


scalars = st.none() | st.booleans() | st.integers(-5, 100) | st.floats() | st.text(max_size=5)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
sections = st.sampled_from(
    ["task", "model", "warmup", "rollout", "trainer", "reward", "sync", "seed", "x"]
)
fields_ = st.sampled_from(["eta", "steps", "workers", "env", "lr", "operators", "d_model"])


@pytest.mark.fuzz
@settings(max_examples=100, deadline=None)
@given(st.dictionaries(sections, st.dictionaries(fields_, values, max_size=3) | values, max_size=4))
def test_fuzzed_configs_raise_only_invalid_input(raw: dict[str, object]) -> None:
    with contextlib.suppress(InvalidInput):
        RLConfig.from_dict(raw)
