"""Served answers in the console: a deployment's recent requests, and one answer's lineage
(the page /requests/ID and /api/requests/ID show what `shipyard lineage request ID` prints)."""

from pathlib import Path
from typing import Any

from fastapi import APIRouter, Query

from shipyard.serve.deploy.state import Records
from shipyard.serve.router.lineage import request_lineage
from shipyard.serve.router.requestlog import RequestLog, requests_dir
from shipyard.web.context import Console

RECENT = 50


def recent(home: Path, deployment: str, limit: int = RECENT) -> list[dict[str, Any]]:
    """The deployment's newest answered requests, newest first (NotFound for no deployment)."""
    Records(home).read(deployment)
    return RequestLog(requests_dir(home)).recent(deployment, limit)


def lineage(console: Console, rid: str) -> dict[str, Any]:
    return request_lineage(console.workspace(), console.home, rid)


def router(console: Console) -> APIRouter:
    """The JSON side; the pages are in `pages`."""
    routes = APIRouter(prefix="/api")

    @routes.get(
        "/requests/{rid}",
        summary="An answer's lineage: its request, model version, what produced it, eval reports",
    )
    def request(rid: str) -> dict[str, Any]:
        return lineage(console, rid)

    @routes.get("/serving/{name}/requests", summary="A deployment's recent answered requests")
    def requests(name: str, limit: int = Query(RECENT, ge=1, le=1000)) -> list[dict[str, Any]]:
        return recent(console.home, name, limit)

    return routes
