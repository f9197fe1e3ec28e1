"""HTTP API of `shipyard scheduler serve` (JSON over loopback by default).

POST   /jobs                    {"team", "gpus", "command", ...job fields} → {"id"}
GET    /jobs[?state=S]          every job (or those in state S)
GET    /jobs/ID                 one job
DELETE /jobs/ID                 cancel
POST   /jobs/ID/utilization     an interactive job's "I am busy" report (resets the reaper)
POST   /nodes/NAME/state        {"state": "up" | "drained" | "quarantined"}
GET    /metrics                 Prometheus text: free GPUs, queue, events, GPU-seconds by team
GET    /status                  free GPUs, largest gang per shape, nodes, usage, chargeback

Every request passes `shipyard.httpguard` first: mutations, and reads of /jobs (which hold each
job's command), need the scheduler's bearer token; mutations need JSON and no foreign Origin;
every request needs a Host that names this server.
"""

import math
import threading
import typing
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

from shipyard.errors import InvalidInput, NotFound
from shipyard.httpguard import Guard
from shipyard.httpguard.asgi import guard_middleware, json_errors
from shipyard.scheduler.model import Job
from shipyard.scheduler.service import Service


def job_from_request(body: dict[str, Any]) -> tuple[Job, list[str]]:
    command = body.pop("command", None)
    if not isinstance(command, list) or not command or not all(isinstance(c, str) for c in command):
        raise InvalidInput("submit: 'command' must be a non-empty list of strings")
    unknown = set(body) - set(_FIELDS)
    if unknown:
        raise InvalidInput(f"submit: unknown fields {sorted(unknown)}")
    for name, value in body.items():
        if not _has_type(value, _FIELDS[name]):
            raise InvalidInput(f"submit: {name} = {value!r:.60} is not of type {_FIELDS[name]}")
    try:
        return Job(id="", **body), command
    except TypeError as exc:
        raise InvalidInput(f"submit: {exc}") from None


# The job fields a client may set, with their types (the rest belong to the scheduler).
_FIELDS = {
    name: hint
    for name, hint in typing.get_type_hints(Job).items()
    if name not in {"id", "submit_time", "duration", "done", "preemptions"}
}


def _has_type(value: Any, hint: Any) -> bool:
    if hint is bool:
        return isinstance(value, bool)
    if isinstance(value, bool):  # JSON true is not a number of GPUs
        return False
    if hint is int:
        return isinstance(value, int)
    if hint is float:
        return isinstance(value, int | float) and math.isfinite(value)
    if hint is str:
        return isinstance(value, str)
    return any(
        _has_type(value, arg) if arg is not type(None) else value is None
        for arg in typing.get_args(hint)
    )


def create_app(service: Service, lock: threading.Lock, guard: Guard) -> FastAPI:
    """The API as a FastAPI app; `lock` serialises it with the scheduling loop."""
    app = FastAPI(title="Shipyard scheduler", docs_url=None, redoc_url=None, openapi_url=None)
    json_errors(app, guard.service)
    store = service.store

    @app.get("/metrics")
    def metrics() -> Response:
        with lock:
            return Response(service.metrics(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/status")
    def status() -> Any:
        with lock:
            return service.status()

    @app.get("/jobs")
    def jobs(state: Annotated[list[str] | None, Query()] = None) -> Any:
        return store.list(*(state or []))

    @app.post("/jobs")
    def submit(request: Request) -> Any:
        job, command = job_from_request(dict(request.state.body))
        service.state.quota.quota(job.team)  # unknown teams are refused at the door
        service.config.policy.tier_of(job)  # and so are unknown priority classes
        return {"id": store.submit(job, command)}

    @app.get("/jobs/{job_id}")
    def job(job_id: str) -> Any:
        return store.get(job_id)

    @app.delete("/jobs/{job_id}")
    def cancel(job_id: str) -> Any:
        return {"id": job_id, "state": store.cancel(job_id)}

    @app.post("/jobs/{job_id}/utilization")
    def utilization(job_id: str) -> Any:
        store.get(job_id)
        with lock:
            service.report_utilization(job_id)
        return {"id": job_id}

    @app.post("/nodes/{node}/state")
    def node_state(node: str, request: Request) -> Any:
        wanted = request.state.body.get("state")
        with lock:
            service.state.set_node_state(node, str(wanted))
        return {"node": node, "state": wanted}

    @app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
    def no_route(path: str, request: Request) -> Any:
        raise NotFound(f"no route {request.method} /{path}")

    # Added last, so it runs first: nothing is answered before the guard has passed it. Jobs
    # hold their commands (paths, arguments, sometimes secrets): reading them needs the token.
    app.middleware("http")(guard_middleware(guard, lambda path: path.startswith("/jobs")))
    return app
