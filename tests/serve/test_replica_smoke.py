"""The replica process end to end over real sockets: completions, chat, streaming, models."""

import json

import httpx


def test_replica_serves_completions_chat_and_streams(tiny_model, start_replica) -> None:
    replica = start_replica("--model", "tiny", "--name", "r0")
    with httpx.Client(base_url=replica.url, timeout=60) as client:
        health = client.get("/health").json()
        assert health["status"] == "ok" and health["artifact"] == tiny_model.id
        assert set(health["cold_start"]) >= {"materialise_s", "load_s"}
        assert client.get("/v1/models").json()["data"][0]["id"] == "tiny"

        body = {"model": "tiny", "prompt": "Hello there", "max_tokens": 5, "temperature": 0}
        reply = client.post("/v1/completions", json=body)
        assert reply.status_code == 200, reply.text
        assert reply.headers["x-shipyard-replica"] == "r0"
        whole = reply.json()
        assert whole["usage"]["completion_tokens"] == 5
        assert whole["choices"][0]["finish_reason"] == "length"

        streamed = ""
        with client.stream("POST", "/v1/completions", json=body | {"stream": True}) as events:
            lines = [line for line in events.iter_lines() if line.startswith("data: ")]
        assert lines[-1] == "data: [DONE]"
        chunks = [json.loads(line[6:]) for line in lines[:-1]]
        streamed = "".join(c["choices"][0]["text"] for c in chunks)
        assert streamed == whole["choices"][0]["text"]  # greedy: same text either way
        assert chunks[-1]["usage"]["completion_tokens"] == 5

        chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
        reply = client.post("/v1/chat/completions", json=chat)
        assert reply.status_code == 200, reply.text
        assert reply.json()["choices"][0]["message"]["role"] == "assistant"
        with client.stream("POST", "/v1/chat/completions", json=chat | {"stream": True}) as ev:
            lines = [line for line in ev.iter_lines() if line.startswith("data: ")]
        assert json.loads(lines[0][6:])["choices"][0]["delta"] == {"role": "assistant"}
        assert lines[-1] == "data: [DONE]"

        missing = client.post("/v1/completions", json=body | {"model": "nope"})
        assert missing.status_code == 404 and "nope" in missing.json()["error"]["message"]
