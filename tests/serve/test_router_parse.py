"""The router's parsers of outside bytes: requests, deployment specs, /health, SSE answers."""

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shipyard.errors import InvalidInput
from shipyard.serve.router.health import read_health
from shipyard.serve.router.mirror import StreamText, answer_text
from shipyard.serve.router.request import parse_request
from shipyard.serve.router.spec import parse_deployment

SYSTEM = "You are the billing assistant of tenant 7. " * 20


def chat(*messages: tuple[str, str], **extra: Any) -> bytes:
    body = {"model": "m", "messages": [{"role": r, "content": c} for r, c in messages], **extra}
    return json.dumps(body).encode()


def test_requests_sharing_a_system_prompt_share_a_prefix_whatever_the_user_says() -> None:
    one = parse_request("chat", chat(("system", SYSTEM), ("user", "refund?")), {})
    two = parse_request("chat", chat(("system", SYSTEM), ("user", "invoice!")), {})
    assert one.prefix == two.prefix == SYSTEM[:1024]
    bare = parse_request("chat", chat(("user", "hello")), {})
    assert bare.prefix == "user: hello\n"
    parts = parse_request(
        "chat",
        json.dumps(
            {
                "model": "m",
                "messages": [{"role": "system", "content": [{"type": "text", "text": "x"}]}],
            }
        ).encode(),
        {},
        prefix_chars=4,
    )
    assert parts.prefix == "x"


def test_completions_prefix_session_and_stream() -> None:
    raw = json.dumps({"model": "m", "prompt": "a" * 5000, "stream": True, "user": "u1"}).encode()
    request = parse_request("completions", raw, {}, prefix_chars=100)
    assert (request.prefix, request.stream, request.session) == ("a" * 100, True, "u1")
    headed = parse_request("completions", raw, {"x-session-id": "s9"})
    assert headed.session == "s9"
    ids = parse_request("completions", b'{"model": "m", "prompt": [[1, 2, 3]]}', {})
    assert ids.prefix == "ids:1,2,3"


@pytest.mark.parametrize(
    ("kind", "body", "named"),
    [
        ("completions", b"[1]", "body: expected a JSON object"),
        ("completions", b"{", "body: not JSON"),
        ("completions", b'{"prompt": "x"}', "model: expected a non-empty string"),
        ("completions", b'{"model": "m"}', "prompt: expected"),
        ("completions", b'{"model": "m", "prompt": [1, "a"]}', "prompt: a list must hold"),
        ("completions", b'{"model": "m", "prompt": "x", "stream": "yes"}', "stream:"),
        ("completions", b'{"model": "m", "prompt": "x", "max_tokens": 0}', "max_tokens:"),
        ("completions", b'{"model": "m", "prompt": "x", "user": 5}', "user:"),
        ("chat", b'{"model": "m", "messages": []}', "messages: expected a non-empty list"),
        ("chat", b'{"model": "m", "messages": [{"role": "x"}]}', "messages[0].role"),
        (
            "chat",
            b'{"model": "m", "messages": [{"role": "user", "content": 3}]}',
            "messages[0].content",
        ),
    ],
)
def test_a_bad_request_is_refused_naming_the_field(kind: Any, body: bytes, named: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_request(kind, body, {})
    assert named in str(caught.value)


GOOD = {
    "versions": [
        {
            "version": "v1",
            "weight": 1,
            "replicas": [{"name": "r0", "url": "http://127.0.0.1:8001", "adapters": ["a"]}],
        }
    ],
    "mirror": None,
}


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"versions": []}, "versions: expected a list of 1 to"),
        ({"extra": 1}, "body: unknown field 'extra'"),
        ({"mirror": {"version": "v9", "fraction": 0.1}}, "mirror.version: 'v9' is not one"),
        ({"mirror": {"version": "v1", "fraction": 2}}, "mirror.fraction: expected 0 to 1.0"),
    ],
)
def test_a_bad_deployment_is_refused_naming_the_field(change: dict[str, Any], named: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_deployment("d", {**GOOD, **change})
    assert named in str(caught.value)


@pytest.mark.parametrize(
    ("replica", "named"),
    [
        ({"name": "r0", "url": "ftp://x:1"}, "versions[0].replicas[0].url"),
        ({"name": "r0", "url": "http://x"}, "versions[0].replicas[0].url"),
        ({"name": "../r", "url": "http://x:1"}, "versions[0].replicas[0].name"),
        ({"name": "r0", "url": "http://x:1", "adapters": [1]}, "replicas[0].adapters[0]"),
    ],
)
def test_a_bad_replica_is_named_by_its_place(replica: dict[str, Any], named: str) -> None:
    body = {"versions": [{"version": "v1", "weight": 1, "replicas": [replica]}]}
    with pytest.raises(InvalidInput) as caught:
        parse_deployment("d", body)
    assert named in str(caught.value)


def test_weights_and_duplicates_are_checked() -> None:
    replica = GOOD["versions"][0]["replicas"]  # type: ignore[index]
    zero = {"versions": [{"version": "v1", "weight": 0, "replicas": replica}]}
    with pytest.raises(InvalidInput, match="at least one version needs a weight"):
        parse_deployment("d", zero)
    twice = {"versions": [GOOD["versions"][0], GOOD["versions"][0]]}  # type: ignore[index]
    with pytest.raises(InvalidInput, match="'v1' appears twice"):
        parse_deployment("d", twice)


def test_health_keeps_only_fields_of_the_expected_types() -> None:
    raw = json.dumps(
        {
            "status": "ok",
            "model": "m",
            "adapters_loaded": ["a", 3],
            "running": "x",
            "kv_used_bytes": 5,
        }
    ).encode()
    assert read_health(raw) == {
        "status": "ok",
        "model": "m",
        "adapters_loaded": ["a"],
        "kv_used_bytes": 5,
    }
    assert read_health(b'{"status": "loading"}') is None
    assert read_health(b"<html>") is None


def test_stream_text_reassembles_split_events() -> None:
    events = b"".join(
        f"data: {json.dumps({'choices': [{'delta': {'content': w}}]})}\n\n".encode()
        for w in ("Hel", "lo")
    )
    text = StreamText()
    for i in range(0, len(events), 7):
        text.feed(events[i : i + 7])
    text.feed(b"data: [DONE]\n\n")
    assert text.text() == "Hello"
    assert answer_text(b'{"choices": [{"text": "hi"}]}') == "hi"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=20,
)
request_like = st.fixed_dictionaries(
    {},
    optional={
        "model": st.one_of(st.text(max_size=20), json_values),
        "prompt": json_values,
        "messages": st.lists(
            st.fixed_dictionaries(
                {},
                optional={"role": st.sampled_from(["system", "user", "x"]), "content": json_values},
            ),
            max_size=4,
        )
        | json_values,
        "stream": json_values,
        "max_tokens": json_values,
        "user": json_values,
    },
)


@pytest.mark.fuzz
@given(body=st.one_of(st.binary(max_size=300), request_like.map(lambda b: json.dumps(b).encode())))
def test_request_parsing_fuzz_only_invalid_input_escapes(body: bytes) -> None:
    for kind in ("completions", "chat"):
        try:
            request = parse_request(kind, body, {}, prefix_chars=64)  # type: ignore[arg-type]
        except InvalidInput:
            continue
        assert len(request.prefix) <= 64 and request.model


replica_like = st.fixed_dictionaries(
    {},
    optional={
        "name": st.sampled_from(["r0", "r1", "", "../x"]) | json_values,
        "url": st.sampled_from(["http://127.0.0.1:1", "http://[::1]:99999", "http://h:x", "x"])
        | json_values,
        "adapters": st.lists(st.sampled_from(["a", "b", ""]) | json_values, max_size=3)
        | json_values,
    },
)
deployment_like = st.fixed_dictionaries(
    {},
    optional={
        "versions": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "version": st.sampled_from(["v1", "v2"]) | json_values,
                    "weight": st.floats() | json_values,
                    "replicas": st.lists(replica_like, max_size=3) | json_values,
                },
            ),
            max_size=3,
        )
        | json_values,
        "mirror": st.fixed_dictionaries(
            {"version": st.sampled_from(["v1", "v2"]) | json_values, "fraction": st.floats()}
        )
        | json_values,
    },
)


@pytest.mark.fuzz
@given(body=deployment_like | json_values, name=st.text(max_size=12))
def test_deployment_parsing_fuzz_only_invalid_input_escapes(body: Any, name: str) -> None:
    try:
        spec = parse_deployment(name, body)
    except InvalidInput:
        return
    assert spec.versions and all(v.replicas for v in spec.versions)


@pytest.mark.fuzz
@given(body=st.one_of(st.binary(max_size=200), json_values.map(lambda v: json.dumps(v).encode())))
def test_health_and_answer_parsing_fuzz_never_raise(body: bytes) -> None:
    read_health(body)
    answer_text(body)
    text = StreamText()
    text.feed(b"data: " + body + b"\n")
    text.text()
