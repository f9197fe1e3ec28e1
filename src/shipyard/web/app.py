"""The console application: pages, /api, /metrics and the guard, on one FastAPI app."""

import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)

from shipyard.errors import ShipyardError
from shipyard.httpguard.asgi import error_status, guard_middleware, validation_message
from shipyard.web import answers, api, pages
from shipyard.web.context import Console

STATIC = Path(__file__).parent / "static"


def create_app(console: Console) -> FastAPI:
    # FastAPI's own /docs pages load scripts from a CDN; /api/docs is drawn here instead.
    app = FastAPI(
        title="Shipyard console",
        docs_url=None,
        redoc_url=None,
        openapi_url="/api/openapi.json",
    )
    registry = CollectorRegistry()
    requests = Counter(
        "shipyard_web_requests_total",
        "console requests answered, by route and status",
        ["route", "status"],
        registry=registry,
    )
    latency = Histogram(
        "shipyard_web_request_seconds",
        "time to answer a console request, by route",
        ["route"],
        registry=registry,
    )

    @app.middleware("http")
    async def measure(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Any:
        start = time.perf_counter()
        response = await call_next(request)
        route = request.scope.get("route")
        name = getattr(route, "path", "unmatched")
        requests.labels(name, str(response.status_code)).inc()
        latency.labels(name).observe(time.perf_counter() - start)
        return response

    # Added last, so it runs first: nothing is answered before the Host is checked.
    app.middleware("http")(guard_middleware(console.guard))

    @app.exception_handler(ShipyardError)
    async def shipyard_error(request: Request, exc: ShipyardError) -> Response:
        return _error(request, error_status(exc, console.guard.service), str(exc))

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> Response:
        return _error(request, 400, validation_message(exc))

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.include_router(pages.router(console))
    app.include_router(answers.router(console))  # before api's catch-all for unknown routes
    app.include_router(api.router(console))
    return app


def _error(request: Request, status: int, message: str) -> Response:
    if request.url.path.startswith("/api/") or request.method != "GET":
        return JSONResponse({"error": message}, status_code=status)
    return pages.TEMPLATES.TemplateResponse(
        request, "error.html", {"status": status, "message": message}, status_code=status
    )
