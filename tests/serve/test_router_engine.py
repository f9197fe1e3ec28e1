"""The router in front of real replica processes (the tiny model): a replica killed under load."""

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.serve.conftest import Replica, TinyModel
from tests.serve.router_stub import start_router

from shipyard.httpguard import call, read_token


async def _stream(client: httpx.AsyncClient, url: str, i: int) -> dict[str, Any]:
    body = {
        "model": "tiny",
        "prompt": f"tenant {i % 4} shares this long system prompt. " * 8 + f"turn {i}",
        "max_tokens": 32,
        "stream": True,
    }
    events: list[str] = []
    async with client.stream("POST", f"{url}/v1/completions", json=body) as reply:
        async for line in reply.aiter_lines():
            if line:
                events.append(line)
    return {"status": reply.status_code, "events": events}


@pytest.mark.slow
def test_real_replicas_killed_under_load_lose_no_request_that_had_not_streamed(
    shipyard_home: Path, tiny_model: TinyModel, start_replica: Callable[..., Replica]
) -> None:
    with ThreadPoolExecutor(3) as pool:  # start all three at once: most of the time is imports
        started = [
            pool.submit(start_replica, "--model", "tiny", "--name", f"r{i}", "--max-batch", "4")
            for i in range(2)
        ]
        router_started = pool.submit(start_router, shipyard_home)
        replicas = [f.result() for f in started]
        router = router_started.result()
    try:
        spec = {
            "versions": [
                {"version": "v1", "replicas": [
                    {"name": f"r{i}", "url": r.url} for i, r in enumerate(replicas)]}
            ]
        }  # fmt: skip
        token = read_token("router", shipyard_home)
        call(f"{router.url}/admin/deployments/tiny", "PUT", spec, token)
        victim = replicas[0]

        async def run() -> list[dict[str, Any]]:
            async with httpx.AsyncClient(timeout=120) as client:
                tasks = [asyncio.create_task(_stream(client, router.url, i)) for i in range(12)]
                deadline = time.monotonic() + 60
                while httpx.get(f"{victim.url}/health").json()["running"] < 1:
                    assert time.monotonic() < deadline, "the victim got no load"
                    await asyncio.sleep(0.01)
                victim.proc.kill()
                late = [asyncio.create_task(_stream(client, router.url, i)) for i in range(12, 18)]
                return list(await asyncio.gather(*tasks, *late))

        results = asyncio.run(run())
    finally:
        router.stop()
    complete = [r for r in results if r["events"] and r["events"][-1] == "data: [DONE]"]
    broken = [r for r in results if r not in complete]
    assert all(r["status"] == 200 for r in results)
    for result in broken:  # began streaming on the victim, then said why it stopped
        assert len(result["events"]) >= 2 and "replica_failed" in result["events"][-1]
        assert "r0" in result["events"][-1]
    assert all(r in complete for r in results[12:])  # sent after the kill: none lost
    assert len(complete) >= 6
