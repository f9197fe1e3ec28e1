"""The router's HTTP face: the OpenAI-compatible endpoint, /metrics, and the guarded admin API.

Every request's Host is checked (a DNS-rebinding page gets 421). Inference calls need no router
token (they are the service) but follow the replica's rules (`Guard.check_inference`: same origin
and JSON, 403/415, checked before the body is read), so the router cannot launder a page's
cross-origin POST into a JSON one. The admin API under /admin follows `shipyard.httpguard`:
token, JSON and same origin for changes, each change audited; the mirrored log (users' prompts
and answers) needs the token to be read.
"""

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.types import ASGIApp, Receive, Scope, Send

from shipyard.errors import Conflict, InvalidInput, NotFound, ShipyardError
from shipyard.httpguard import Guard, Refused
from shipyard.httpguard.asgi import guard_middleware, json_errors
from shipyard.serve.request_id import request_id
from shipyard.serve.router.health import DEFAULT_INTERVAL_S, check_all, run_checks
from shipyard.serve.router.metrics import RouterMetrics
from shipyard.serve.router.policy import make_policy
from shipyard.serve.router.proxy import Forwarder
from shipyard.serve.router.request import DEFAULT_PREFIX_CHARS, MAX_BODY, Kind, parse_request
from shipyard.serve.router.requestlog import DEFAULT_SEGMENTS, RequestLog, Writer
from shipyard.serve.router.spec import check_name, parse_deployment
from shipyard.serve.router.table import Deployment, ReplicaState, Table, Unavailable

SERVICE = "router"
_ERRORS: dict[type[ShipyardError], tuple[int, str]] = {
    InvalidInput: (400, "invalid_request_error"),
    NotFound: (404, "not_found_error"),
    Conflict: (409, "conflict_error"),
    Unavailable: (503, "unavailable_error"),
}


@dataclass(frozen=True)
class RouterConfig:
    policy: str = "prefix"
    epsilon: float = 0.25
    prefix_chars: int = DEFAULT_PREFIX_CHARS
    health_interval_s: float = DEFAULT_INTERVAL_S
    request_log: Path | None = None  # the request log's directory; None: no log
    request_log_mib: float = 128.0  # the log's bound on disk

    def __post_init__(self) -> None:
        make_policy(self.policy, self.epsilon)  # names a bad policy or epsilon
        if not 1 <= self.prefix_chars <= 1 << 20:
            raise InvalidInput(f"prefix_chars: expected 1 to {1 << 20}, got {self.prefix_chars}")
        if not 0.05 <= self.health_interval_s <= 3600:
            raise InvalidInput(
                f"health_interval_s: expected 0.05 to 3600 seconds, got {self.health_interval_s}"
            )
        if not 1 <= self.request_log_mib <= 1 << 20:
            raise InvalidInput(
                f"request_log_mib: expected 1 to {1 << 20} MiB, got {self.request_log_mib}"
            )

    def open_log(self) -> Writer | None:
        if self.request_log is None:
            return None
        segment = int(self.request_log_mib * (1 << 20)) // (DEFAULT_SEGMENTS + 1)
        return Writer(RequestLog(self.request_log, segment, DEFAULT_SEGMENTS))


class HostCheck:
    """Pure ASGI (streams pass through untouched): a request must name this server."""

    def __init__(self, app: ASGIApp, guard: Guard) -> None:
        self.app, self.guard = app, guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), "")
            if not self.guard.allows_host(host):
                reply = JSONResponse({"error": f"Host {host[:100]!r} is not this server"}, 421)
                await reply(scope, receive, send)
                return
        await self.app(scope, receive, send)


def openai_error(exc: ShipyardError) -> JSONResponse:
    status, kind = _ERRORS.get(type(exc), (500, "internal_error"))
    reply = JSONResponse({"error": {"message": str(exc), "type": kind, "code": status}}, status)
    if status == 503:
        reply.headers["Retry-After"] = "1"
    return reply


def _refused(exc: Refused) -> JSONResponse:
    error = {"message": exc.reason, "type": "invalid_request_error", "code": exc.status}
    reply = JSONResponse({"error": error}, exc.status)
    if exc.status == 401:
        reply.headers["WWW-Authenticate"] = "Bearer"
    return reply


def create_app(config: RouterConfig, guard: Guard) -> ASGIApp:
    """The router as an ASGI app: Host checked on every request, streams passed through."""
    table = Table(make_policy(config.policy, config.epsilon))
    metrics = RouterMetrics(table)
    holder: dict[str, Any] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=256)
        timeout = httpx.Timeout(connect=5.0, read=600.0, write=30.0, pool=30.0)
        async with httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=False) as client:
            log = holder["log"] = config.open_log()
            holder["forwarder"] = Forwarder(table, client, metrics, log)
            holder["client"] = client
            checks = asyncio.create_task(run_checks(client, table, config.health_interval_s))
            try:
                yield
            finally:
                checks.cancel()
                if log is not None:
                    await asyncio.to_thread(log.close)  # what is queued reaches the disk

    app = FastAPI(title="Shipyard router", docs_url=None, redoc_url=None, lifespan=lifespan)

    async def infer(kind: Kind, path: str, request: Request) -> Response:
        rid = request_id(request.headers)  # a hostile or missing id is replaced, not refused
        try:
            guard.check_inference(request.method, request.headers)
            raw = await _body(request)
            parsed = parse_request(kind, raw, request.headers, config.prefix_chars)
            table.resolve(parsed.model)[0].spec.keys.check(request.headers)
            forwarder: Forwarder = holder["forwarder"]
            return await forwarder.handle(path, parsed, rid, request.headers)
        except Refused as exc:  # the replica's own rule, applied before anything is forwarded
            reply = _refused(exc)
        except ShipyardError as exc:
            reply = openai_error(exc)
        reply.headers["x-request-id"] = rid
        return reply

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await infer("completions", "/v1/completions", request)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        return await infer("chat", "/v1/chat/completions", request)

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        names = sorted(
            set(table.deployments)
            | {a for d in table.deployments.values() for a in d.spec.adapters()}
        )
        return {
            "object": "list",
            "data": [{"id": n, "object": "model", "owned_by": "shipyard"} for n in names],
        }

    @app.get("/health")
    def health() -> dict[str, Any]:
        log: Writer | None = holder.get("log")
        logged = None
        if log is not None:
            logged = {"dropped": log.dropped, "failed": log.failed, "last_error": log.last_error}
        return {
            "status": "ok",
            "policy": config.policy,
            "epsilon": config.epsilon,
            "request_log": logged,
        }

    @app.get("/metrics")
    def metrics_text() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    app.mount("/admin", _admin(table, guard, holder))
    return HostCheck(app, guard)  # outermost, and pure ASGI: no buffering of streams


async def _body(request: Request) -> bytes:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY:
        raise InvalidInput(f"body: {declared} bytes is over the {MAX_BODY}-byte limit")
    chunks, size = [], 0
    async for chunk in request.stream():
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_BODY:
            raise InvalidInput(f"body: over the {MAX_BODY}-byte limit")
    return b"".join(chunks)


def _admin(table: Table, guard: Guard, holder: dict[str, Any]) -> FastAPI:
    admin = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    json_errors(admin, SERVICE)
    # The mirrored log holds users' prompts and both answers: reading it needs the token too.
    admin.middleware("http")(guard_middleware(guard, lambda path: path.endswith("/mirrored")))

    @admin.get("/deployments")
    def list_deployments() -> dict[str, Any]:
        return {"deployments": [_status(d) for d in table.deployments.values()]}

    @admin.put("/deployments/{name}")
    async def put_deployment(name: str, request: Request) -> dict[str, Any]:
        deployment = table.put(
            parse_deployment(check_name(name, "deployment name"), request.state.body)
        )
        client = holder.get("client")
        if client is not None:  # learn health and resident adapters before the first request
            await check_all(client, table)
        return _status(deployment)

    @admin.get("/deployments/{name}")
    def get_deployment(name: str) -> dict[str, Any]:
        return _status(table.get(name))

    @admin.get("/deployments/{name}/mirrored")
    def mirrored(name: str, limit: int = 100) -> dict[str, Any]:
        if not 1 <= limit <= 1000:
            raise InvalidInput(f"limit: expected 1 to 1000, got {limit}")
        records = list(table.get(name).stats.mirrored)[-limit:]
        return {"deployment": name, "mirrored": [r.to_json() for r in records]}

    @admin.delete("/deployments/{name}")
    def delete_deployment(name: str) -> dict[str, Any]:
        table.delete(name)
        return {"deleted": name}

    return admin


def _status(deployment: Deployment) -> dict[str, Any]:
    """The deployment's split, per-version counters since the last PUT, and replica states."""
    stats = deployment.stats
    spec = deployment.spec
    return {
        "name": deployment.name,
        "since": stats.since,
        "versions": {
            v.version: {
                "weight": v.weight,
                **stats.version(v.version).to_json(),
                "replicas": [
                    _replica(r.name, r.adapters, deployment.replicas[v.version][r.name])
                    for r in v.replicas
                ],
            }
            for v in spec.versions
        },
        "mirror": spec.to_json()["mirror"],
        "mirrored": len(stats.mirrored),
    }


def _replica(name: str, adapters: frozenset[str], state: ReplicaState) -> dict[str, Any]:
    return {
        "name": name,
        "url": state.url,
        "adapters": sorted(adapters),
        "healthy": state.healthy,
        "in_flight": state.in_flight,
        "adapters_loaded": sorted(state.adapters_loaded),
        "last_error": state.last_error,
        "health": state.health,
    }
