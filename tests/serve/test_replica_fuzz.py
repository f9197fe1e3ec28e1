"""Fuzz the OpenAI request parser: whatever the body, only Shipyard's own errors escape."""

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shipyard.errors import InvalidInput
from shipyard.serve.engine.openai import parse

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
