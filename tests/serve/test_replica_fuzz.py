"""Fuzz the OpenAI request parser and the replica's checks: only Shipyard's own errors escape."""

from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from transformers import AutoModelForCausalLM, AutoTokenizer

from shipyard.errors import InvalidInput
from shipyard.serve.engine import AdapterSet, Engine, EngineConfig
from shipyard.serve.engine.openai import parse
from shipyard.serve.replica_http import Served

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
FIELDS = [
    "prompt",
    "messages",
    "max_tokens",
    "temperature",
    "top_p",
    "seed",
    "stream",
    "stop",
    "logprobs",
    "top_logprobs",
    "n",
    "user",
    "stream_options",
    "echo",
    "max_completion_tokens",
    "presence_penalty",
]
near_valid = st.fixed_dictionaries(
    {"model": st.sampled_from(["tiny", "", 3])},
    optional={name: json_values for name in FIELDS},
)


@pytest.mark.fuzz
@given(body=json_values | near_valid, kind=st.sampled_from(["completion", "chat"]))
def test_parse_refuses_only_with_invalid_input(body: Any, kind: str) -> None:
    try:
        call = parse(kind, body)  # type: ignore[arg-type]
    except InvalidInput as exc:
        assert str(exc)
        return
    assert call.model and (call.prompt is not None or call.messages)
    assert call.max_tokens is None or call.max_tokens >= 1
    assert 0 <= call.temperature <= 2 and 0 < call.top_p <= 1


@pytest.fixture(scope="module")
def served(tiny_model_dir: Path) -> Served:
    """The replica's request checks over the tiny model (its engine is never started)."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    engine = Engine(
        model, EngineConfig(), adapters=AdapterSet(model, {"a1": lambda: (Path(), False)})
    )
    return Served(engine, tokenizer, "tiny", "r0", "0" * 64, frozenset({2}))


@pytest.mark.fuzz
@given(
    body=near_valid,
    kind=st.sampled_from(["completion", "chat"]),
    prompt=st.one_of(
        st.text(max_size=3000),
        st.lists(st.integers(min_value=0, max_value=60_000), min_size=1, max_size=600),
    ),
    model=st.sampled_from(["tiny", "a1", "a2"]),
    tier=st.sampled_from(["interactive", "standard", "batch"]),
)
def test_request_checks_refuse_only_with_invalid_input(
    served: Served, body: Any, kind: str, prompt: Any, model: str, tier: str
) -> None:
    body = dict(body, model=model)
    body["prompt" if kind == "completion" else "messages"] = (
        prompt if kind == "completion" else [{"role": "user", "content": str(prompt)}]
    )
    try:
        request = served.request_for(parse(kind, body), tier)  # type: ignore[arg-type]
    except InvalidInput as exc:
        assert str(exc)
        return
    context = served.engine.context
    assert len(request.prompt_ids) > 0 and len(request.prompt_ids) + request.max_tokens <= context
    assert all(0 <= t < len(served.tokenizer) for t in request.prompt_ids)
    assert request.adapter in (None, "a1")
