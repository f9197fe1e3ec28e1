"""`shipyard batch search-serve`: answers queries from the index an alias points at, and flips
the alias with no failed or slow query.

A flip loads the new index (and its model's encoder) completely, at low CPU priority, before it
moves the alias (compare-and-swap) and swaps one reference; queries in flight finish on the
index they started with. The index it replaced stays loaded, so a rollback is a swap back.

Routes: GET /health, GET /v1/search?q=TEXT&k=10, GET /v1/index, GET /metrics;
POST /v1/flip {"index": REF} and POST /v1/rollback {} need the token in
`$SHIPYARD_HOME/tokens/batch-search.token` (httpguard rules: loopback, JSON, same origin).
"""

import sys
import threading
import time
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)

from shipyard.batch.cutover import check_gate, previous_target
from shipyard.batch.search import LoadedIndex, Loader
from shipyard.errors import Conflict, InvalidInput, NotFound
from shipyard.httpguard import Guard, is_loopback, token_path
from shipyard.httpguard.asgi import guard_middleware, json_errors, start_server
from shipyard.workspace import Workspace

SERVICE = "batch-search"


class Searcher:
    def __init__(self, alias: str, min_recall: float) -> None:
        self.alias = alias
        self.min_recall = min_recall
        self.loader = Loader()
        self._flip_lock = threading.Lock()  # one flip at a time; queries never take it
        with _ws() as ws:
            target = ws.catalog.get_alias(alias)
            if target is None:
                raise NotFound(f"alias {alias!r} does not exist: build an index and flip to it")
            self.current: LoadedIndex = self.loader.load(ws, target)
        self.previous: LoadedIndex | None = None

    def flip(self, ref: str, rollback: bool = False) -> dict[str, str]:
        with self._flip_lock, _ws() as ws:
            old = self.current
            if rollback:
                target = (
                    self.previous.artifact if self.previous else previous_target(ws, self.alias)
                )
            else:
                target = check_gate(ws, ref, self.min_recall)
            if target == old.artifact:
                raise Conflict(f"alias {self.alias!r} already points at {target[:16]}")
            if self.previous and self.previous.artifact == target:
                new = self.previous
            else:
                new = self.loader.load(ws, target)  # before anything is swapped
            ws.move_alias(self.alias, target, expect=old.artifact)
            self.current, self.previous = new, old  # one reference: queries see old or new
            return {"alias": self.alias, "from": old.artifact, "to": target}


class _ws:
    """A workspace per flip: the catalog connection stays on the thread that uses it."""

    def __enter__(self) -> Workspace:
        self.ws = Workspace.open()
        return self.ws

    def __exit__(self, *exc: Any) -> None:
        self.ws.close()


def create_app(searcher: Searcher, guard: Guard) -> FastAPI:
    app = FastAPI(title="Shipyard batch search", docs_url=None, redoc_url=None, openapi_url=None)
    registry = CollectorRegistry()
    latency = Histogram(
        "shipyard_batch_search_seconds",
        "time to answer a search, encoding included",
        registry=registry,
        buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0),
    )
    flips = Counter(
        "shipyard_batch_flips_total", "alias flips and rollbacks", ["kind"], registry=registry
    )
    app.middleware("http")(guard_middleware(guard))
    json_errors(app, SERVICE)

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "index": searcher.current.artifact}

    @app.get("/v1/search")
    def search(q: str = "", k: int = 10) -> dict[str, Any]:
        start = time.perf_counter()
        index = searcher.current  # one read: this query stays on this index
        hits = index.search(index.embed(q), k)
        elapsed = time.perf_counter() - start
        latency.observe(elapsed)
        return {
            "index": index.artifact,
            "model_version": index.model.version,
            "hits": hits,
            "ms": round(1000 * elapsed, 3),
        }

    @app.get("/v1/index")
    def describe() -> dict[str, Any]:
        previous = searcher.previous
        return {
            "alias": searcher.alias,
            "current": searcher.current.artifact,
            "previous": previous.artifact if previous else None,
            "metadata": searcher.current.metadata,
        }

    @app.post("/v1/flip")
    def flip(request: Request) -> dict[str, str]:
        ref = request.state.body.get("index")
        if not isinstance(ref, str) or not ref:
            raise InvalidInput('body must be {"index": "<index artifact ref>"}')
        out = searcher.flip(ref)
        flips.labels("flip").inc()
        return out

    @app.post("/v1/rollback")
    def rollback() -> dict[str, str]:
        out = searcher.flip("", rollback=True)
        flips.labels("rollback").inc()
        return out

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app


def serve(
    home: Path,
    alias: str,
    host: str = "127.0.0.1",
    port: int = 8650,
    min_recall: float = 0.95,
    allow_remote: bool = False,
) -> None:
    """Serve until interrupted; prints `listening http://HOST:PORT` once ready."""
    if not is_loopback(host) and not allow_remote:
        raise InvalidInput(f"--host {host} is reachable from other machines; add --allow-remote")
    searcher = Searcher(alias, min_recall)
    guard = Guard.start(SERVICE, home, host)
    server = start_server(create_app(searcher, guard), host, port, SERVICE)
    shown = f"[{host}]" if ":" in host else host
    print(f"listening http://{shown}:{server.port}", flush=True)
    print(f"token for flips in {token_path(SERVICE, home)}", file=sys.stderr, flush=True)
    try:
        server.thread.join()
    except KeyboardInterrupt:
        server.stop()
