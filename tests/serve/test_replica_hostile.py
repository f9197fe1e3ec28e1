"""Hostile requests get a clear 4xx JSON error naming the field; adapters and metrics over HTTP."""

import json
from pathlib import Path

import httpx
from tests.serve.test_engine_adapters import make_adapter

from shipyard.serve.models import put_adapter_dir
from shipyard.workspace import Workspace

GOOD = {"model": "tiny", "prompt": "Hello", "max_tokens": 3, "temperature": 0}


def test_bad_requests_are_named_and_adapters_and_metrics_work(
    tiny_model, workspace: Workspace, start_replica, tmp_path: Path
) -> None:
    adapter = make_adapter(tiny_model.path, tmp_path / "a1", seed=1)
    put_adapter_dir(workspace, adapter, "lora-a1", base="tiny")
    replica = start_replica("--model", "tiny", "--adapter", "a1=lora-a1", "--name", "r-h")
    with httpx.Client(base_url=replica.url, timeout=60) as client:

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
