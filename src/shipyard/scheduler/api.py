"""HTTP API of `shipyard scheduler serve` (JSON over loopback by default).

POST   /jobs                    {"team", "gpus", "command", ...job fields} → {"id"}
GET    /jobs[?state=S]          every job (or those in state S)
GET    /jobs/ID                 one job
DELETE /jobs/ID                 cancel
POST   /jobs/ID/utilization     an interactive job's "I am busy" report (resets the reaper)
POST   /nodes/NAME/state        {"state": "up" | "drained" | "quarantined"}
GET    /metrics                 Prometheus text: free GPUs, queue, events, GPU-seconds by team
GET    /status                  free GPUs, largest gang per shape, nodes, usage, chargeback
"""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from shipyard.errors import InvalidInput, NotFound, ShipyardError
from shipyard.scheduler.model import Job
from shipyard.scheduler.service import Service


def job_from_request(body: dict[str, Any]) -> tuple[Job, list[str]]:
    command = body.pop("command", None)
    if not isinstance(command, list) or not all(isinstance(c, str) for c in command):
        raise InvalidInput("submit: 'command' must be a list of strings")
    allowed = set(Job.__dataclass_fields__) - {"id", "submit_time", "duration", "done"}
    unknown = set(body) - allowed
    if unknown:
        raise InvalidInput(f"submit: unknown fields {sorted(unknown)}")
    try:
        return Job(id="", **body), command
    except TypeError as exc:
        raise InvalidInput(f"submit: {exc}") from None


def make_server(
    service: Service, lock: threading.Lock, host: str, port: int
) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return  # quiet: the service logs its own decisions

        def _reply(self, code: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _handle(self, method: str) -> None:
            url = urlparse(self.path)
            if url.path == "/metrics" and method == "GET":
                with lock:
                    data = service.metrics().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            parts = [p for p in url.path.split("/") if p]
            try:
                self._reply(200, self._route(method, parts, parse_qs(url.query)))
            except NotFound as exc:
                self._reply(404, {"error": str(exc)})
            except ShipyardError as exc:
                self._reply(400, {"error": str(exc)})
            except ValueError as exc:
                self._reply(400, {"error": f"bad request: {exc}"})

        def _body(self) -> dict[str, Any]:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            if not isinstance(body, dict):
                raise InvalidInput("request body: expected a JSON object")
            return body

        def _route(self, method: str, parts: list[str], query: dict[str, list[str]]) -> Any:
            store = service.store
            if parts == ["status"] and method == "GET":
                with lock:
                    return service.status()
            if parts == ["jobs"] and method == "GET":
                return store.list(*query.get("state", []))
            if parts == ["jobs"] and method == "POST":
                job, command = job_from_request(self._body())
                service.state.quota.quota(job.team)  # unknown teams are refused at the door
                service.config.policy.tier_of(job)  # and so are unknown priority classes
                return {"id": store.submit(job, command)}
            if len(parts) == 2 and parts[0] == "jobs" and method == "GET":
                return store.get(parts[1])
            if len(parts) == 2 and parts[0] == "jobs" and method == "DELETE":
                return {"id": parts[1], "state": store.cancel(parts[1])}
            if len(parts) == 3 and parts[0] == "nodes" and parts[2] == "state" and method == "POST":
                wanted = self._body().get("state")
                with lock:
                    service.state.set_node_state(parts[1], str(wanted))
                return {"node": parts[1], "state": wanted}
            if len(parts) == 3 and parts[2] == "utilization" and method == "POST":
                store.get(parts[1])
                with lock:
                    service.report_utilization(parts[1])
                return {"id": parts[1]}
            raise NotFound(f"no route {method} /{'/'.join(parts)}")

        def do_GET(self) -> None:
            self._handle("GET")

        def do_POST(self) -> None:
            self._handle("POST")

        def do_DELETE(self) -> None:
            self._handle("DELETE")

    return ThreadingHTTPServer((host, port), Handler)
