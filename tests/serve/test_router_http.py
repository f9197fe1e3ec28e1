"""The router process in front of stand-in replica processes, over real sockets."""

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from tests.serve.router_stub import Proc, start_router, start_stub

from shipyard.errors import NotFound
from shipyard.httpguard import read_token
from shipyard.httpguard.apikeys import hash_key, new_key
from shipyard.serve.router import RouterClient


def system(tenant: int) -> str:
    """A long system prompt, one per tenant (its start differs, as tenants' prompts do)."""
    return f"You are the support assistant of tenant {tenant}. " + "Answer briefly. " * 60


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Proc, str]]:
    home = tmp_path_factory.mktemp("router-home")
    proc = start_router(home, "--epsilon", "0.25")
    try:
        yield proc, read_token("router", home)
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def pool() -> Iterator[list[Proc]]:
    """Three quick replicas (p0, p1, p2, each serving adapter `sql`) shared by the module."""
    procs = [start_stub(f"p{i}", "--adapter", "sql") for i in range(3)]
    yield procs
    for proc in procs:
        proc.stop()


@pytest.fixture
def stubs() -> Iterator[Callable[..., Proc]]:
    started: list[Proc] = []

    def make(name: str, *options: str, port: int = 0) -> Proc:
        started.append(start_stub(name, *options, port=port))
        return started[-1]

    yield make
    for proc in started:
        proc.stop()


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def put(router: tuple[Proc, str], name: str, body: Any, **headers: str) -> httpx.Response:
    proc, token = router
    sent = {"authorization": f"Bearer {token}", "content-type": "application/json", **headers}
    return httpx.put(f"{proc.url}/admin/deployments/{name}", content=json.dumps(body), headers=sent)


def versions(*split: tuple[str, float, list[Proc]]) -> dict[str, Any]:
    return {
        "versions": [
            {
                "version": v,
                "weight": w,
                "replicas": [{"name": f"{v}-{i}", "url": p.url} for i, p in enumerate(procs)],
            }
            for v, w, procs in split
        ]
    }


def ask(url: str, model: str, tenant: int = 0, **extra: Any) -> httpx.Response:
    body = {
        "model": model,
        "messages": [
            {"role": "system", "content": system(tenant)},
            {"role": "user", "content": f"question {time.monotonic()}"},
        ],
        **extra,
    }
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)


def status(router: tuple[Proc, str], name: str) -> Any:
    return httpx.get(f"{router[0].url}/admin/deployments/{name}").json()


def test_a_tenants_requests_stay_on_one_replica_and_stream_through(
    router: tuple[Proc, str], pool: list[Proc]
) -> None:
    a, b = pool[0], pool[1]
    assert put(router, "chat", versions(("v1", 1.0, [a, b]))).status_code == 200
    url = router[0].url
    for tenant in range(6):
        served = {ask(url, "chat", tenant).headers["x-shipyard-replica"] for _ in range(4)}
        assert len(served) == 1  # one system prompt, one replica (sequential: no load)
    body = {"model": "chat", "prompt": "hi", "stream": True, "max_tokens": 4}
    with httpx.stream("POST", f"{url}/v1/completions", json=body) as reply:
        lines = [line for line in reply.iter_lines() if line]
    assert reply.status_code == 200 and lines[-1] == "data: [DONE]" and len(lines) == 5
    stats = status(router, "chat")["versions"]["v1"]
    assert stats["requests"] == 25 and stats["errors"] == 0 and stats["ttft_ms_p50"] > 0


def test_unknown_names_and_bad_fields_get_a_4xx_naming_them(
    router: tuple[Proc, str], pool: list[Proc]
) -> None:
    a = pool[0]
    assert put(router, "base", {"versions": [{"version": "v1", "replicas": [
        {"name": "a", "url": a.url, "adapters": ["sql"]}]}]}).status_code == 200  # fmt: skip
    url = router[0].url
    assert ask(url, "sql").status_code == 200
    missing = ask(url, "poet")
    assert missing.status_code == 404 and "'poet'" in missing.json()["error"]["message"]
    bad = httpx.post(f"{url}/v1/chat/completions", json={"model": "base", "messages": "hi"})
    assert bad.status_code == 400 and "messages" in bad.json()["error"]["message"]
    gone = httpx.get(f"{url}/admin/deployments/nothing-here")
    assert gone.status_code == 404 and "'nothing-here'" in gone.json()["error"]
    foreign = httpx.get(f"{url}/v1/models", headers={"host": "evil.example"})
    assert foreign.status_code == 421
    models = {m["id"] for m in httpx.get(f"{url}/v1/models").json()["data"]}
    assert {"base", "sql"} <= models


def test_the_admin_api_wants_the_token_json_and_a_good_spec(
    router: tuple[Proc, str], pool: list[Proc]
) -> None:
    proc, _ = router
    body = versions(("v1", 1.0, [pool[0]]))
    assert put((proc, "wrong-token-" * 4), "x", body).status_code == 401
    assert put(router, "x", body, **{"content-type": "text/plain"}).status_code == 415
    assert put(router, "x", body, origin="http://evil.example").status_code == 403
    bad = put(router, "x", {"versions": [{"version": "v1", "weight": -1, "replicas": []}]})
    assert bad.status_code == 400 and "versions[0].weight" in bad.json()["error"]
    assert httpx.get(f"{proc.url}/admin/deployments/x").status_code == 404  # nothing stored


def test_consecutive_rollouts_leave_no_canary_route_behind(
    router: tuple[Proc, str], pool: list[Proc]
) -> None:
    one, two, three = pool
    url = router[0].url
    assert put(router, "roll", versions(("v1", 0.5, [one]), ("v2", 0.5, [two]))).status_code == 200
    first = [ask(url, "roll", i, stream=False) for i in range(12)]
    assert {r.headers["x-shipyard-version"] for r in first} == {"v1", "v2"}
    assert (
        put(router, "roll", versions(("v2", 0.5, [two]), ("v3", 0.5, [three]))).status_code == 200
    )
    served_before = httpx.get(f"{one.url}/stats").json()["started"]
    second = [ask(url, "roll", i) for i in range(24)]
    assert {r.headers["x-shipyard-version"] for r in second} == {"v2", "v3"}
    assert httpx.get(f"{one.url}/stats").json()["started"] == served_before
    counters = status(router, "roll")["versions"]
    assert set(counters) == {"v2", "v3"}
    assert counters["v2"]["requests"] + counters["v3"]["requests"] == 24  # since the last PUT


def test_mirrored_traffic_is_answered_by_the_shadow_and_recorded(
    router: tuple[Proc, str], pool: list[Proc]
) -> None:
    live, shadow = pool[0], pool[1]
    spec = versions(("v1", 1.0, [live]), ("v2", 0.0, [shadow]))
    spec["mirror"] = {"version": "v2", "fraction": 1.0}
    assert put(router, "mirrored", spec).status_code == 200
    url = router[0].url
    replies = [ask(url, "mirrored", 1, stream=True), ask(url, "mirrored", 2)]
    assert all(r.headers["x-shipyard-replica"] == "p0" for r in replies)
    assert "p1" not in replies[0].text + replies[1].text

    def records() -> list[Any]:
        auth = {"authorization": f"Bearer {router[1]}"}
        reply = httpx.get(f"{url}/admin/deployments/mirrored/mirrored", headers=auth).json()
        return list(reply["mirrored"])

    wait_for(lambda: len(records()) == 2, "two mirrored records")
    # Prompts and both answers: not for anyone who can reach the port without the token.
    for headers in ({}, {"authorization": "Bearer wrong"}):
        refused = httpx.get(f"{url}/admin/deployments/mirrored/mirrored", headers=headers)
        assert refused.status_code == 401 and "mirrored" not in refused.text
        assert system(1)[:30] not in refused.text
    for record in records():
        assert record["shadow"]["version"] == "v2" and record["shadow"]["status"] == 200
        assert record["shadow"]["text"].startswith("p1")
        assert record["primary"]["version"] == "v1" and record["primary"]["text"].startswith("p0")


def test_a_pages_cross_origin_post_is_refused_not_laundered(
    router: tuple[Proc, str], pool: list[Proc]
) -> None:
    a = pool[2]
    assert put(router, "laundry", versions(("v1", 1.0, [a]))).status_code == 200
    url = router[0].url
    started = httpx.get(f"{a.url}/stats").json()["started"]
    body = json.dumps({"model": "laundry", "prompt": "hi", "max_tokens": 2})
    # What `fetch(router, {method: "POST", mode: "no-cors", body})` from a web page sends.
    page = {"content-type": "text/plain;charset=UTF-8", "origin": "http://evil.example"}
    for path in ("/v1/completions", "/v1/chat/completions"):
        reply = httpx.post(f"{url}{path}", content=body, headers=page)
        assert reply.status_code == 403 and "cross-origin" in reply.json()["error"]["message"]
    plain = httpx.post(
        f"{url}/v1/completions", content=body, headers={"content-type": "text/plain"}
    )
    assert plain.status_code == 415
    assert httpx.get(f"{a.url}/stats").json()["started"] == started  # nothing forwarded
    same = {"content-type": "application/json", "origin": url}
    assert httpx.post(f"{url}/v1/completions", content=body, headers=same).status_code == 200


def test_a_deployment_with_api_keys_serves_only_their_holders(
    router: tuple[Proc, str], pool: list[Proc]
) -> None:
    key, other = new_key(), new_key()
    spec = versions(("v1", 1.0, [pool[2]])) | {"api_keys": [hash_key(key)]}
    assert put(router, "keyed", spec).status_code == 200
    assert put(router, "open", versions(("v1", 1.0, [pool[2]]))).status_code == 200
    url = router[0].url
    body = {"model": "keyed", "prompt": "hi", "max_tokens": 2}
    started = httpx.get(f"{pool[2].url}/stats").json()["started"]
    for auth in ({}, {"authorization": f"Bearer {other}"}, {"authorization": key}):
        reply = httpx.post(f"{url}/v1/completions", json=body, headers=auth)
        assert reply.status_code == 401 and "API key" in reply.json()["error"]["message"]
        assert reply.headers["www-authenticate"] == "Bearer"
    assert httpx.get(f"{pool[2].url}/stats").json()["started"] == started  # nothing forwarded
    auth = {"authorization": f"Bearer {key}"}
    assert httpx.post(f"{url}/v1/completions", json=body, headers=auth).status_code == 200
    # The keys are per deployment: another one stays open, and a key is not a router token.
    assert httpx.post(f"{url}/v1/completions", json=body | {"model": "open"}).status_code == 200
    assert put((router[0], key), "keyed", spec).status_code == 401
    raw = put(router, "raw", versions(("v1", 1.0, [pool[2]])) | {"api_keys": [key]})
    assert raw.status_code == 400 and "api_keys[0]" in raw.json()["error"]


def test_health_checks_take_a_dead_replica_out_and_bring_it_back(
    router: tuple[Proc, str], stubs: Callable[..., Proc]
) -> None:
    a, b = stubs("a"), stubs("b")
    assert put(router, "heal", versions(("v1", 1.0, [a, b]))).status_code == 200
    port = int(a.url.rsplit(":", 1)[1])

    def healthy() -> dict[str, bool]:
        replicas = status(router, "heal")["versions"]["v1"]["replicas"]
        return {r["url"]: r["healthy"] for r in replicas}

    a.stop()
    wait_for(lambda: healthy()[a.url] is False, "the dead replica out of rotation")
    served = {ask(router[0].url, "heal", t).headers["x-shipyard-replica"] for t in range(6)}
    assert served == {"b"}
    stubs("a", port=port)
    wait_for(lambda: healthy()[a.url] is True, "the replica back in rotation")
    served = {ask(router[0].url, "heal", t).headers["x-shipyard-replica"] for t in range(10)}
    assert served == {"a", "b"}


async def _stream(client: httpx.AsyncClient, url: str, tenant: int) -> dict[str, Any]:
    body = {"model": "load", "prompt": system(tenant), "stream": True}
    events: list[str] = []
    async with client.stream("POST", f"{url}/v1/completions", json=body) as reply:
        replica = reply.headers.get("x-shipyard-replica")
        async for line in reply.aiter_lines():
            if line:
                events.append(line)
    return {"status": reply.status_code, "replica": replica, "events": events}


def test_a_replica_killed_under_load_loses_no_request_that_had_not_streamed(
    router: tuple[Proc, str], stubs: Callable[..., Proc]
) -> None:
    slow = ("--first-delay", "0.4", "--token-delay", "0.05", "--tokens", "20")
    victim, survivor = stubs("victim", *slow), stubs("survivor", *slow)
    assert put(router, "load", versions(("v1", 1.0, [victim, survivor]))).status_code == 200
    url = router[0].url

    async def run() -> list[dict[str, Any]]:
        async with httpx.AsyncClient(timeout=60) as client:
            first = [asyncio.create_task(_stream(client, url, t)) for t in range(24)]
            # Kill while some of the victim's requests stream and others wait for a first token.
            deadline = time.monotonic() + 20
            while httpx.get(f"{victim.url}/stats").json()["in_flight"] < 4:
                assert time.monotonic() < deadline, "the victim got no load"
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.5)
            victim.popen.kill()
            late = [asyncio.create_task(_stream(client, url, t)) for t in range(24, 40)]
            return list(await asyncio.gather(*first, *late))

    results = asyncio.run(run())
    failed = [r for r in results if r["events"][-1] != "data: [DONE]"]
    for result in results:
        assert result["status"] == 200
    for result in failed:  # only answers the victim had begun may fail, and they say so
        assert result["replica"] == "victim"
        assert len(result["events"]) >= 2 and result["events"][0].startswith("data: {")
        assert "replica_failed" in result["events"][-1] and "v1-0" in result["events"][-1]
    assert len(failed) < len(results)
    assert all(r["replica"] == "survivor" for r in results[24:])  # after the kill: all moved
    stats = status(router, "load")["versions"]["v1"]
    assert stats["requests"] == 40 and stats["errors"] == len(failed)


def test_the_python_client_puts_reads_and_deletes(
    router: tuple[Proc, str], pool: list[Proc]
) -> None:
    client = RouterClient(router[0].url, token=router[1])
    replicas = [{"name": "c0", "url": pool[2].url, "adapters": []}]
    put_reply = client.put("client-made", [{"version": "v1", "weight": 1, "replicas": replicas}])
    assert put_reply["versions"]["v1"]["replicas"][0]["name"] == "c0"
    assert client.status("client-made")["versions"]["v1"]["requests"] == 0
    assert client.mirrored("client-made")["mirrored"] == []
    assert client.delete("client-made") == {"deleted": "client-made"}
    with pytest.raises(NotFound, match="client-made"):
        client.status("client-made")


def test_bad_numbers_on_the_routers_command_line_are_usage_errors() -> None:
    for option, value in (("--port", "99999"), ("--epsilon", "nan"), ("--health-interval", "0")):
        result = subprocess.run(
            [sys.executable, "-m", "shipyard.serve.router", option, value],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 2 and f"argument {option}: expected" in result.stderr
        assert "Traceback" not in result.stderr
