"""The replica over real HTTP: OpenAI endpoints, streaming, tiers, adapters, hostile input."""

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.serve.deploy_support import wait_for
from tests.serve.test_engine_adapters import make_adapter
from tests.serve.test_models_import import cli

from shipyard.httpguard.apikeys import hash_key, new_key
from shipyard.workspace import Workspace

GOOD = {"model": "tiny", "prompt": "Hello", "max_tokens": 3, "temperature": 0}


def test_replica_over_http(tiny_model, workspace: Workspace, start_replica, tmp_path: Path) -> None:
    adapter = make_adapter(tiny_model.path, tmp_path / "a1", seed=1)
    assert (
        cli("model", "import", "adapter", str(adapter), "--base", "tiny", "--name", "lora-a1") == 0
    )
    record = workspace.catalog.get_artifact(workspace.resolve("lora-a1"))
    assert record is not None and record.kind == "adapter"
    assert record.metadata == {"format": "peft", "base": tiny_model.id}
    # 0.2 MiB of KV is ~800 tokens of the tiny model: two long requests cannot both run.
    replica = start_replica(
        "--model", "tiny", "--adapter", "a1=lora-a1", "--name", "r0", "--kv-cache-mib", "0.2"
    )
    with httpx.Client(base_url=replica.url, timeout=60) as client:
        check_completions_chat_and_streams(client, tiny_model.id)
        check_tiers(replica.url)

        def refused(
            body: object,
            status: int,
            param: str | None,
            *,
            raw: bytes | None = None,
            headers: dict[str, str] | None = None,
        ) -> str:
            content = raw if raw is not None else json.dumps(body).encode()
            sent = {"Content-Type": "application/json", **(headers or {})}
            reply = client.post("/v1/completions", content=content, headers=sent)
            assert reply.status_code == status, reply.text
            error = reply.json()["error"]
            assert error["param"] == param, error
            message: str = error["message"]
            return message

        refused(None, 400, None, raw=b"{not json")
        refused([1, 2], 400, None)
        assert "max_tokens" in refused(GOOD | {"max_tokens": -1}, 400, "max_tokens")
        assert "max_tokens" in refused(GOOD | {"max_tokens": "3"}, 400, "max_tokens")
        assert "context" in refused(GOOD | {"max_tokens": 10**6}, 400, "max_tokens")
        refused(GOOD | {"max_tokens": 10**30}, 400, "max_tokens")
        refused(GOOD | {"temperature": "hot"}, 400, "temperature")
        refused(GOOD | {"temperature": 9}, 400, "temperature")
        refused(GOOD | {"stream": "yes"}, 400, "stream")
        refused(GOOD | {"prompt": 42}, 400, "prompt")
        refused(GOOD | {"prompt": [10**9]}, 400, "prompt")
        refused(GOOD | {"n": 3}, 400, "n")
        refused(GOOD | {"bogus": 1}, 400, "bogus")
        refused({"prompt": "x"}, 400, "model")
        assert "context" in refused(GOOD | {"prompt": "word " * 600}, 400, "prompt")
        assert "nope" in refused(GOOD | {"model": "nope"}, 404, "model")
        assert "x-shipyard-tier" in refused(GOOD, 400, None, headers={"x-shipyard-tier": "gold"})

        wrong_type = client.post(
            "/v1/completions", content=b"{}", headers={"Content-Type": "text/plain"}
        )
        assert wrong_type.status_code == 415
        cross = client.post("/v1/completions", json=GOOD, headers={"Origin": "http://evil.example"})
        assert cross.status_code == 403
        assert client.get("/health", headers={"Host": "evil.example"}).status_code == 421
        assert client.get("/nowhere").status_code == 404

        chat = {"model": "tiny", "messages": [{"role": "wizard", "content": "hi"}]}
        reply = client.post("/v1/chat/completions", json=chat)
        assert reply.status_code == 400 and reply.json()["error"]["param"] == "messages[0].role"

        # The adapter is listed, served, and changes the output.
        names = [m["id"] for m in client.get("/v1/models").json()["data"]]
        assert names == ["tiny", "a1"]
        base = client.post("/v1/completions", json=GOOD | {"max_tokens": 6}).json()
        tuned = client.post("/v1/completions", json=GOOD | {"max_tokens": 6, "model": "a1"})
        assert tuned.status_code == 200, tuned.text
        assert tuned.json()["choices"][0]["text"] != base["choices"][0]["text"]
        assert client.get("/health").json()["adapters_loaded"] == ["a1"]

        metrics = client.get("/metrics").text
        for name in (
            "shipyard_serve_ttft_seconds_bucket",
            "shipyard_serve_inter_token_seconds",
            'shipyard_serve_queue_depth{tier="batch"}',
            "shipyard_serve_prefix_lookups_total",
            "shipyard_serve_generated_tokens_total",
        ):
            assert name in metrics, name
        check_client_leaving_cancels(client)

    check_drain_on_sigterm(replica)


def check_completions_chat_and_streams(client: httpx.Client, artifact: str) -> None:
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["artifact"] == artifact
    assert set(health["cold_start"]) >= {"materialise_s", "load_s"}

    body = GOOD | {"prompt": "Hello there", "max_tokens": 5}
    reply = client.post("/v1/completions", json=body)
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-shipyard-replica"] == "r0"
    whole = reply.json()
    assert whole["usage"]["completion_tokens"] == 5
    assert whole["choices"][0]["finish_reason"] == "length"

    with client.stream("POST", "/v1/completions", json=body | {"stream": True}) as events:
        lines = [line for line in events.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    streamed = "".join(c["choices"][0]["text"] for c in chunks)
    assert streamed == whole["choices"][0]["text"]  # greedy: the same text either way
    assert chunks[-1]["usage"]["completion_tokens"] == 5
    assert chunks[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] >= 0

    scored = client.post("/v1/completions", json=body | {"logprobs": 2}).json()["choices"][0]
    assert scored["text"] == whole["choices"][0]["text"]
    assert len(scored["logprobs"]["token_logprobs"]) == 5
    assert all(len(top) <= 2 for top in scored["logprobs"]["top_logprobs"])

    chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    reply = client.post("/v1/chat/completions", json=chat | {"logprobs": True, "top_logprobs": 1})
    assert reply.status_code == 200, reply.text
    choice = reply.json()["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert all(item["logprob"] <= 0 for item in choice["logprobs"]["content"])
    with client.stream("POST", "/v1/chat/completions", json=chat | {"stream": True}) as events:
        lines = [line for line in events.iter_lines() if line.startswith("data: ")]
    assert json.loads(lines[0][6:])["choices"][0]["delta"] == {"role": "assistant"}
    assert lines[-1] == "data: [DONE]"


def check_tiers(url: str) -> None:
    """A running batch request: another batch one is shed (429), an interactive one preempts it."""
    long = GOOD | {"prompt": "Go", "max_tokens": 490, "stream": True}
    short = GOOD | {"prompt": "Go", "max_tokens": 400}
    batch = {"x-shipyard-tier": "batch"}
    with (
        httpx.Client(base_url=url, timeout=60) as streaming,
        httpx.Client(base_url=url, timeout=60) as other,
        streaming.stream("POST", "/v1/completions", json=long, headers=batch) as events,
    ):
        lines = events.iter_lines()
        assert next(line for line in lines if line.startswith("data: "))  # it runs
        shed = other.post("/v1/completions", json=short, headers=batch)
        assert shed.status_code == 429 and int(shed.headers["Retry-After"]) >= 1
        assert "batch" in shed.json()["error"]["message"]
        urgent = other.post(
            "/v1/completions", json=short, headers={"x-shipyard-tier": "interactive"}
        )
        assert urgent.status_code == 200, urgent.text
        rest = [line for line in lines if line.startswith("data: ")]
    assert rest[-1] == "data: [DONE]"
    error = json.loads(rest[-2][6:])["error"]
    assert error["code"] == 503 and "preempted" in error["message"]


def check_client_leaving_cancels(client: httpx.Client) -> None:
    """A client that leaves mid-answer (streamed or whole) frees its row in the engine."""
    long = GOOD | {"prompt": "Go", "max_tokens": 490}

    def cancelled() -> float:
        for family in text_string_to_metric_families(client.get("/metrics").text):
            for sample in family.samples:
                if sample.name == "shipyard_serve_requests_total" and sample.labels == {
                    "tier": "standard",
                    "outcome": "cancelled",
                }:
                    return sample.value
        return 0.0

    before = cancelled()
    with client.stream("POST", "/v1/completions", json=long | {"stream": True}) as events:
        assert next(line for line in events.iter_lines() if line.startswith("data: "))
    wait_for(lambda: cancelled() == before + 1, 60, "the abandoned stream's cancellation")

    host, port = client.base_url.host, client.base_url.port
    body = json.dumps(long).encode()
    with socket.create_connection((host, port), timeout=30) as raw:
        raw.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (host.encode(), port or 80, len(body), body)
        )
        wait_for(lambda: client.get("/health").json()["running"] == 1, 60, "the whole call")
    wait_for(lambda: cancelled() == before + 2, 60, "the abandoned call's cancellation")
    assert client.get("/health").json()["running"] == 0


def check_drain_on_sigterm(replica: Any) -> None:
    """SIGTERM: no new connections, but a stream already running ends whole, then exit 0."""
    body = GOOD | {"prompt": "Go", "max_tokens": 120, "stream": True}
    with (
        httpx.Client(base_url=replica.url, timeout=60) as client,
        client.stream("POST", "/v1/completions", json=body) as events,
    ):
        lines = (line for line in events.iter_lines() if line.startswith("data: "))
        assert next(lines)
        replica.proc.send_signal(signal.SIGTERM)
        rest = list(lines)
    assert rest[-1] == "data: [DONE]"
    assert json.loads(rest[-2][6:])["usage"]["completion_tokens"] == 120
    assert replica.proc.wait(timeout=60) == 0
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{replica.url}/health", timeout=5)


def test_a_replica_with_api_keys_answers_only_a_holder_of_one(tiny_model, start_replica) -> None:
    key, other = new_key(), new_key()
    replica = start_replica(
        "--model", "tiny", "--name", "keyed", "--api-key-hash", hash_key(key),
        "--api-key-hash", hash_key(other),
    )  # fmt: skip
    with httpx.Client(base_url=replica.url, timeout=60) as client:
        for headers in ({}, {"Authorization": f"Bearer {new_key()}"}, {"Authorization": key}):
            reply = client.post("/v1/completions", json=GOOD, headers=headers)
            assert reply.status_code == 401 and "API key" in reply.json()["error"]["message"]
        for good in (key, other):
            auth = {"Authorization": f"Bearer {good}"}
            reply = client.post("/v1/completions", json=GOOD, headers=auth)
            assert reply.status_code == 200, reply.text
        assert client.get("/health").status_code == 200  # reads stay open
    command = [sys.executable, "-m", "shipyard.serve.replica", "--model", "tiny"]
    bad = subprocess.run(
        [*command, "--api-key-hash", key], capture_output=True, text=True, timeout=120
    )  # the key itself where its hash belongs: refused before anything loads
    assert bad.returncode == 2 and "--api-key-hash[0]: expected sha256:" in bad.stderr


def test_a_port_out_of_range_is_a_usage_error() -> None:
    command = [sys.executable, "-m", "shipyard.serve.replica", "--model", "tiny", "--port"]
    result = subprocess.run([*command, "99999"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "argument --port: expected" in result.stderr
    assert "Traceback" not in result.stderr
