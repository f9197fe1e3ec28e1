"""The deployment spec: YAML to validated dataclasses; a bad field named with what is allowed."""

import contextlib
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shipyard.errors import InvalidInput
from shipyard.serve.deploy.spec import (
    DeploymentSpec,
    load_spec,
    parse_spec,
    spec_from_dict,
    spec_to_dict,
)

FULL = """
name: chat
model: smol-prod
engine: {kind: transformers, max_batch: 8, kv_cache_mib: 64}
replicas: {min: 0, max: 4}
tier: interactive
adapters: {sql: sql-lora}
slo: {ttft_ms_p50: 200, ttft_ms_p99: 900, error_rate: 0.02}
autoscale: {queue_up: 3, queue_down: 1, idle_to_zero_s: 300}
canary: {stages: [1, 5, 25, 100], hold_s: 30, min_requests: 10}
eval_gate: {tasks: [arith-mc, 'jsonl:gate.jsonl'], max_drop: 0.05, z: 2.5}
api_keys: ["sha256:abababababababababababababababababababababababababababababababab"]
"""


def test_full_spec_parses_and_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "chat.yaml"
    path.write_text(FULL)
    (tmp_path / "gate.jsonl").write_text('{"id": "q1", "question": "2+2?", "answer": "4"}\n')
    spec = load_spec(path)
    assert spec.name == "chat" and spec.model == "smol-prod"
    assert spec.engine.max_batch == 8 and spec.replicas.min == 0 and spec.replicas.max == 4
    assert spec.tier == "interactive" and dict(spec.adapters) == {"sql": "sql-lora"}
    assert spec.slo.ttft_ms_p99 == 900 and spec.autoscale.idle_to_zero_s == 300
    assert spec.canary.stages == (1, 5, 25, 100) and spec.canary.min_requests == 10
    # a relative task file is taken from the spec's folder
    assert spec.eval_gate.tasks == ("arith-mc", f"jsonl:{tmp_path / 'gate.jsonl'}")
    assert spec.eval_gate.max_drop == 0.05 and spec.eval_gate.z == 2.5
    assert spec.api_keys == ("sha256:" + "ab" * 32,)
    assert spec_from_dict(spec_to_dict(spec)) == spec


def test_defaults_and_shorthands() -> None:
    spec = parse_spec("name: a\nmodel: m\nreplicas: 2\nengine: transformers\n")
    assert spec.replicas.min == spec.replicas.max == 2
    assert spec.engine.kind == "transformers" and spec.tier == "standard"
    assert spec.canary.stages == (1, 5, 25, 100)
    openai = parse_spec("name: a\nmodel: m\nengine: {kind: openai, url: 'http://127.0.0.1:8000'}")
    assert openai.engine.url == "http://127.0.0.1:8000"


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("name: a\nmodel: m\nreplica: 2", "unknown field 'replica': allowed name, model"),
        ("name: a\nmodel: m\ntier: gold", "tier 'gold': allowed interactive, standard, batch"),
        ("name: a\nmodel: m\nengine: vllm", "engine.kind 'vllm': allowed transformers, openai"),
        ("name: a\nmodel: m\nengine: openai", "engine openai needs url"),
        ("name: a\nmodel: m\nengine: {url: 'http://x:1'}", "only engine openai takes a url"),
        ("name: a\nmodel: m\nengine: {peer: nope}", "engine.peer 'nope' is not HOST:PORT"),
        ("name: a\nmodel: m\nengine: {kind: openai, url: 'http://x:1/v1'}", "no path"),
        ("name: a\nmodel: m\nreplicas: {min: 3, max: 1}", "min 3, max 1: allowed 0 <= min"),
        ("name: a\nmodel: m\nreplicas: {min: 0, max: 0}", "1 <= max"),
        ("name: a\nmodel: m\nautoscale: {queue_up: 1, queue_down: 2}", "queue_down < queue_up"),
        ("name: a\nmodel: m\nautoscale: {ttft_up: 1.5}", "ttft_up <= 1"),
        ("name: a\nmodel: m\nautoscale: {max_step: true}", "autoscale.max_step True: expected"),
        ("name: a\nmodel: m\ncanary: {stages: [5, 1, 100]}", "must increase"),
        ("name: a\nmodel: m\ncanary: {stages: [1, 50]}", "ending at 100"),
        ("name: a\nmodel: m\nslo: {error_rate: 2}", "slo.error_rate 2.0: allowed 0 to 1"),
        ("name: a\nmodel: m\nslo: {ttft_ms_p50: .nan}", "expected a finite number"),
        ("name: a\nmodel: m\neval_gate: {max_drop: 3}", "eval_gate.max_drop 3.0: allowed 0 to 1"),
        ("name: a\nmodel: m\neval_gate: {z: 11}", "eval_gate.z 11.0: allowed 0 to 10"),
        ("name: a\nmodel: m\neval_gate: {tasks: arith-mc}", "eval_gate.tasks: expected a list"),
        (
            "name: a\nmodel: m\neval_gate: {tasks: [arith-mc, no-such-task]}",
            "eval_gate.tasks 'no-such-task': no eval task named 'no-such-task' (registered: ",
        ),
        ("name: a\nmodel: m\neval_gate: {tasks: [arith-mc, arith-mc]}", "named twice"),
        ("name: a\nmodel: m\neval_gate: {tasks: ['jsonl:/no/such.jsonl']}", "cannot read"),
        (
            "name: a\nmodel: m\neval_gate: {items: gate.jsonl}",
            "eval_gate.items: the gate's own item file is gone; name eval tasks in "
            "spec: eval_gate.tasks",
        ),
        ("name: a\nmodel: m\neval_gate: {min_score: 0.5}", "unknown field 'min_score'"),
        ("name: Chat!\nmodel: m", "name 'Chat!': allowed lowercase"),
        ("model: m", "missing required field 'name'"),
        ("- 1\n- 2", "spec: expected a mapping"),
        ("name: [", "not valid YAML"),
    ],
)
def test_bad_field_is_named_with_allowed_values(text: str, named: str) -> None:
    with pytest.raises(InvalidInput, match=None) as caught:
        parse_spec(text)
    assert named in str(caught.value)


def test_unreadable_or_huge_spec_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="cannot read"):
        load_spec(tmp_path / "absent.yaml")
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (2 << 20))
    with pytest.raises(InvalidInput, match="larger than"):
        load_spec(big)


_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 300), st.floats(allow_nan=True), st.text(max_size=8)
)
_keys = st.sampled_from(
    ["name", "model", "engine", "replicas", "tier", "adapters", "slo", "autoscale", "canary",
     "eval_gate", "kind", "url", "min", "max", "stages", "items", "tasks", "queue_up", "hold_s",
     "zzz"]
)  # fmt: skip
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_keys, inner, max_size=5),
    max_leaves=12,
)


@pytest.mark.fuzz
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(_keys, _values, max_size=8))
def test_fuzz_structured_specs_only_raise_invalid_input(data: dict[str, object]) -> None:
    try:
        spec = spec_from_dict({"name": "a", "model": "m", **data})
    except InvalidInput:
        return
    assert isinstance(spec, DeploymentSpec)
    assert spec_from_dict(spec_to_dict(spec)) == spec


@pytest.mark.fuzz
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_fuzz_raw_bytes_only_raise_invalid_input(raw: bytes) -> None:
    with contextlib.suppress(InvalidInput):
        parse_spec(raw)


def test_yaml_tags_are_not_executed() -> None:
    with pytest.raises(InvalidInput, match="not valid YAML"):
        parse_spec("name: !!python/object/apply:os.system ['true']\nmodel: m")
    assert yaml.safe_load("a: 1") == {"a": 1}


@pytest.mark.parametrize(
    ("keys", "named"),
    [
        ("sk-the-key-itself", "api_keys: expected a list"),
        ("[sk-the-key-itself]", "api_keys[0]: expected sha256:<64 lowercase hex>"),
        ("[sha256:" + "AB" * 32 + "]", "api_keys[0]: expected sha256"),
        ("[sha256:" + "ab" * 31 + "]", "api_keys[0]: expected sha256"),
        ("[sha256:" + "ab" * 32 + ", sha256:" + "ab" * 32 + "]", "appears twice"),
        ("[1]", "api_keys[0]: expected sha256"),
    ],
)
def test_api_keys_must_be_hashes(keys: str, named: str) -> None:
    with pytest.raises(InvalidInput, match=re.escape(named)):
        parse_spec(f"name: a\nmodel: m\napi_keys: {keys}\n")
