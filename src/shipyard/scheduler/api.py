"""HTTP API of `shipyard scheduler serve` (JSON over loopback by default).

POST   /jobs                    {"team", "gpus", "command", ...job fields} → {"id"}
GET    /jobs[?state=S]          every job (or those in state S)
GET    /jobs/ID                 one job
DELETE /jobs/ID                 cancel
POST   /jobs/ID/utilization     an interactive job's "I am busy" report (resets the reaper)
POST   /nodes/NAME/state        {"state": "up" | "drained" | "quarantined"}
GET    /metrics                 Prometheus text: free GPUs, queue, events, GPU-seconds by team
GET    /status                  free GPUs, largest gang per shape, nodes, usage, chargeback

Every request passes `shipyard.httpguard` first: mutations need the scheduler's bearer token,
JSON and no foreign Origin; every request needs a Host that names this server.
"""

import math
import threading
import typing
from http.server import ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST

from shipyard.errors import InvalidInput, NotFound
from shipyard.httpguard import Guard, GuardedHandler, Raw
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


def make_server(
    service: Service, lock: threading.Lock, guard: Guard, host: str, port: int
) -> ThreadingHTTPServer:
    class Handler(GuardedHandler):
        def route(
            self, method: str, parts: list[str], query: dict[str, list[str]], body: dict[str, Any]
        ) -> Any:
            store = service.store
            if parts == ["metrics"] and method == "GET":
                with lock:
                    return Raw(service.metrics(), CONTENT_TYPE_LATEST)
            if parts == ["status"] and method == "GET":
                with lock:
                    return service.status()
            if parts == ["jobs"] and method == "GET":
                return store.list(*query.get("state", []))
            if parts == ["jobs"] and method == "POST":
                job, command = job_from_request(body)
                service.state.quota.quota(job.team)  # unknown teams are refused at the door
                service.config.policy.tier_of(job)  # and so are unknown priority classes
                return {"id": store.submit(job, command)}
            if len(parts) == 2 and parts[0] == "jobs" and method == "GET":
                return store.get(parts[1])
            if len(parts) == 2 and parts[0] == "jobs" and method == "DELETE":
                return {"id": parts[1], "state": store.cancel(parts[1])}
            if len(parts) == 3 and parts[0] == "nodes" and parts[2] == "state" and method == "POST":
                wanted = body.get("state")
                with lock:
                    service.state.set_node_state(parts[1], str(wanted))
                return {"node": parts[1], "state": wanted}
            if len(parts) == 3 and parts[2] == "utilization" and method == "POST":
                store.get(parts[1])
                with lock:
                    service.report_utilization(parts[1])
                return {"id": parts[1]}
            raise NotFound(f"no route {method} /{'/'.join(parts)}")

    Handler.guard = guard
    return ThreadingHTTPServer((host, port), Handler)
