"""The autoscaler loop end to end: wake from zero on the first request (503 + Retry-After
meanwhile), scale up under a queue, replace a killed replica, scale back to zero when idle."""

import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from shipyard.workspace import Workspace

from .deploy_support import Running, complete, router_fixture, wait_for  # noqa: F401

SPEC = """
name: chat
model: tiny
engine: {max_batch: 1}
replicas: {min: 0, max: 2}
autoscale: {interval_s: 0.1, queue_up: 1, queue_down: 0.5, up_cooldown_s: 0,
            down_cooldown_s: 1, idle_to_zero_s: 3}
"""


def test_zero_wake_scale_up_replace_and_back_to_zero(
    shipyard_home: Path, workspace: Workspace, tiny_model: Any, router: str
) -> None:
    running = Running(SPEC, router, shipyard_home)
    try:
        ctrl = running.ctrl
        assert ctrl is not None and ctrl.count() == 0
        refused = complete(router, "Hello")
        assert refused.status_code == 503, refused.text
        assert int(refused.headers["retry-after"]) >= 1
        assert "scaled to zero" in refused.json()["error"]["message"]
        wait_for(lambda: ctrl.count() == 1, 120, "a replica woken by the first request")
        assert complete(router, "Hello").status_code == 200

        # A queue builds behind one running request at a time: the autoscaler adds a replica
        def busy() -> None:
            body = {"model": "chat", "prompt": "Tell me", "max_tokens": 200}
            httpx.post(f"{router}/v1/completions", json=body, timeout=120)

        load = [threading.Thread(target=busy) for _ in range(10)]
        for thread in load:
            thread.start()
        wait_for(lambda: ctrl.count() == 2, 120, "a scale-up under a queue")
        for thread in load:
            thread.join()

        # A replica that hangs (SIGSTOP: alive, silent) stops answering /health: the controller
        # kills it after 3 probes, and a dead one is replaced; the router keeps answering
        victim = ctrl.replicas[ctrl.current][0]
        assert victim.pid is not None
        ctrl.probe_timeout_s = 2.0  # the test's replicas are idle now: 2 s is plenty
        os.kill(victim.pid, signal.SIGSTOP)
        wait_for(
            lambda: (
                all(r.pid != victim.pid for r in ctrl.replicas[ctrl.current]) and ctrl.count() >= 1
            ),
            120,
            "the killed replica's replacement",
        )
        assert complete(router, "Hello again").status_code == 200

        # Idle: down one at a time, then to zero
        wait_for(lambda: ctrl.count() == 0, 60, "scale to zero when idle")

        scraped = httpx.get(f"{ctrl.endpoint.url}/metrics", timeout=10).text
        values = {
            (sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(scraped)
            for sample in family.samples
        }

        def metric(name: str, **labels: str) -> float | None:
            return values.get((f"shipyard_serve_deploy_{name}", frozenset(labels.items())))

        version = ctrl.current
        assert (metric("autoscale_decisions_total", deployment="chat", action="wake") or 0) >= 1
        assert (metric("turned_away_total", deployment="chat") or 0) >= 1
        assert metric("replacements_total", deployment="chat", version=version) == 1
        assert metric("replicas", deployment="chat", version=version, role="current") is not None
        rebound = httpx.get(f"{ctrl.endpoint.url}/metrics", headers={"Host": "evil.example"})
        assert rebound.status_code == 421  # a DNS-rebinding page cannot read it
    finally:
        running.close()
    log = shipyard_home / "serve/deployments/chat.decisions.jsonl"
    decisions = [json.loads(line) for line in log.open()]
    actions = [d["action"] for d in decisions if d["kind"] == "autoscale"]
    assert {"wake", "up", "zero"} <= set(actions)
    up = next(d for d in decisions if d.get("action") == "up")
    assert up["inputs"]["weighted_queue"] > 1 and up["from"] == 1 and up["to"] == 2
    assert any(d["kind"] == "unhealthy" and d["replica"] == victim.name for d in decisions)
    assert any(d["kind"] == "replace" and d["replica"] == victim.name for d in decisions)
    # every decision carries its inputs
    scaled = [d for d in decisions if d["kind"] == "autoscale"]
    assert all({"replicas", "queue", "ttft_p99_ms", "idle_s"} <= set(d["inputs"]) for d in scaled)
