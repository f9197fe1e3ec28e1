"""Health checks: GET /health on every replica takes dead ones out of rotation and brings
recovered ones back; the answer also tells the router which adapters each replica holds.

A replica is out after one failed check (or one failed request, marked by the proxy) and back
after one good check. A /health answer is outside input: only fields of the expected types are
kept.
"""

import asyncio
import json
import logging
from typing import Any

import httpx

from shipyard.serve.router.table import ReplicaState, Table

DEFAULT_INTERVAL_S = 1.0
TIMEOUT_S = 2.0
MAX_HEALTH = 64 << 10
log = logging.getLogger("shipyard.router")
_NUMBERS = ("running", "kv_used_bytes", "kv_budget_bytes", "prefix_cache_bytes", "prefix_hit_rate")


def read_health(raw: bytes) -> dict[str, Any] | None:
    """The usable fields of a /health body, or None when it does not say the replica is ok."""
    if len(raw) > MAX_HEALTH:
        return None
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(body, dict) or body.get("status") != "ok":
        return None
    kept: dict[str, Any] = {"status": "ok"}
    if isinstance(body.get("model"), str):
        kept["model"] = body["model"][:256]
    adapters = body.get("adapters_loaded")
    if isinstance(adapters, list):
        kept["adapters_loaded"] = [a[:256] for a in adapters[:4096] if isinstance(a, str)]
    for name in _NUMBERS:
        value = body.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            kept[name] = value
    queue = body.get("queue")
    if isinstance(queue, dict):
        kept["queue"] = {
            k[:32]: v for k, v in list(queue.items())[:8] if isinstance(v, int) and v >= 0
        }
    return kept


async def check(client: httpx.AsyncClient, state: ReplicaState) -> None:
    """One health check of `state`, recorded on it."""
    try:
        reply = await client.get(f"{state.url}/health", timeout=TIMEOUT_S)
        health = read_health(reply.content) if reply.status_code == 200 else None
        why = f"/health answered {reply.status_code}" if health is None else ""
    except httpx.HTTPError as exc:
        health, why = None, f"/health: {type(exc).__name__} {exc}".strip()
    if health is None:
        state.mark_down(why or "/health did not say ok")
        return
    state.healthy = True
    state.last_error = ""
    state.health = health
    state.served_model = health.get("model")
    state.adapters_loaded = frozenset(health.get("adapters_loaded", ()))


async def check_all(client: httpx.AsyncClient, table: Table) -> None:
    await asyncio.gather(*(check(client, state) for state in table.replicas()))


async def run_checks(client: httpx.AsyncClient, table: Table, interval_s: float) -> None:
    """Check every replica each `interval_s` seconds, until cancelled."""
    while True:
        try:
            await check_all(client, table)
        except Exception:  # a bug must not stop the checks for good: say so, keep checking
            log.exception("health checks failed")
        await asyncio.sleep(interval_s)
