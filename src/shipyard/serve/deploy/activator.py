"""The controller's own loopback endpoint: its /metrics, and the stand-in for a version at zero.

The router needs at least one replica per version, so a version scaled to zero is registered with
this endpoint instead. It answers every inference request with 503 and `Retry-After` (the last
measured replica start, rounded up) and counts it: that count is the demand signal that wakes the
deployment (the controller reads `take_waiting()` every tick). Only a request the replica itself
would take counts: a cross-origin or non-JSON POST (403/415, `Guard.check_inference`) or one
without one of the deployment's API keys (401) is refused and wakes nothing. GET /metrics serves the
controller's Prometheus registry, GET /health says the version is scaled to zero. Every request's
`Host` must name this server (`shipyard.httpguard`, 421 otherwise); nothing here changes state.
"""

import math
import threading
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from shipyard.httpguard import Guard, Refused
from shipyard.httpguard.apikeys import OPEN, ApiKeys
from shipyard.httpguard.asgi import start_server
from shipyard.serve.edge import HostCheck

SERVICE = "serve-deploy"


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message}}, status, headers=headers)


class Activator:
    def __init__(
        self, model: str, home: Path, registry: CollectorRegistry, keys: ApiKeys = OPEN
    ) -> None:
        self.model = model
        self.keys = keys
        self.retry_after_s = 5.0
        self.turned_away = 0  # since start
        self._waiting = 0  # since the last take_waiting()
        self._lock = threading.Lock()
        guard = Guard.start(SERVICE, home, "127.0.0.1")
        self._server = start_server(self._app(registry, guard), "127.0.0.1", 0, "activator")
        self.url = f"http://127.0.0.1:{self._server.port}"

    def _app(self, registry: CollectorRegistry, guard: Guard) -> FastAPI:
        app = FastAPI(title="Shipyard activator", docs_url=None, redoc_url=None, openapi_url=None)

        @app.get("/metrics")
        def metrics() -> Response:
            return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

        @app.get("/health")
        def health() -> dict[str, Any]:
            return self.health()

        @app.get("/v1/models")
        def models() -> dict[str, Any]:
            return {"object": "list", "data": [{"id": self.model}]}

        @app.get("/{path:path}")
        def nowhere(path: str) -> Response:
            return _error(404, f"no endpoint GET {'/' + path[:80]!r}")

        @app.post("/{path:path}")  # an inference request of any kind: no service token
        async def wake(path: str, request: Request) -> Response:
            try:  # a page's cross-origin text/plain POST is no demand: it must not wake anything
                guard.check_inference("POST", request.headers)
                self.keys.check(request.headers)  # nor is a request without the API key
            except Refused as exc:
                return _error(exc.status, exc.reason)
            length = request.headers.get("content-length", "")
            if length.isdigit() and int(length) <= 1 << 20:
                await request.body()  # read, so the connection can take the retry
            wait = self.note_request()
            message = (
                f"deployment {self.model!r} is scaled to zero; a replica is starting: "
                f"retry after {wait} s"
            )
            error = {"error": {"message": message, "type": "scaled_to_zero"}}
            return JSONResponse(error, 503, headers={"Retry-After": str(wait)})

        app.add_middleware(HostCheck, guard=guard, refuse=_error)
        return app

    def health(self) -> dict[str, Any]:
        return {
            "status": "ok",
            "model": self.model,
            "scaled_to_zero": True,
            "queue": {"interactive": 0, "standard": 0, "batch": 0},
            "running": 0,
        }

    def note_request(self) -> int:
        """Count a request turned away; the seconds its client should wait."""
        with self._lock:
            self._waiting += 1
            self.turned_away += 1
        return max(1, math.ceil(self.retry_after_s))

    def take_waiting(self) -> int:
        """Requests turned away since the last call."""
        with self._lock:
            waiting, self._waiting = self._waiting, 0
        return waiting

    def close(self) -> None:
        self._server.stop()
