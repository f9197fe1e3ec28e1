"""The controller's own loopback endpoint: its /metrics, and the stand-in for a version at zero.

The router needs at least one replica per version, so a version scaled to zero is registered with
this endpoint instead. It answers every inference request with 503 and `Retry-After` (the last
measured replica start, rounded up) and counts it: that count is the demand signal that wakes the
deployment (the controller reads `take_waiting()` every tick). GET /metrics serves the
controller's Prometheus registry, GET /health says the version is scaled to zero. Every request's
`Host` must name this server (`shipyard.httpguard`, 421 otherwise); nothing here changes state.
"""

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from shipyard.httpguard import Guard, Refused

SERVICE = "serve-deploy"


class Activator:
    def __init__(self, model: str, home: Path, registry: CollectorRegistry) -> None:
        self.model = model
        self.retry_after_s = 5.0
        self.turned_away = 0  # since start
        self._waiting = 0  # since the last take_waiting()
        self._lock = threading.Lock()
        guard = Guard.start(SERVICE, home, "127.0.0.1")
        activator = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self._refused("GET"):
                    return
                if self.path == "/metrics":
                    self._reply(200, generate_latest(registry), CONTENT_TYPE_LATEST)
                elif self.path == "/health":
                    self._json(200, activator.health())
                elif self.path == "/v1/models":
                    self._json(200, {"object": "list", "data": [{"id": activator.model}]})
                else:
                    self._json(404, {"error": {"message": f"no endpoint GET {self.path[:80]!r}"}})

            def do_POST(self) -> None:
                if self._refused("GET"):  # Host only: an inference request needs no token
                    return
                length = self.headers.get("Content-Length", "0")
                if length.isdigit() and int(length) <= 1 << 20:
                    self.rfile.read(int(length))
                wait = activator.note_request()
                message = (
                    f"deployment {activator.model!r} is scaled to zero; a replica is starting: "
                    f"retry after {wait} s"
                )
                error = {"error": {"message": message, "type": "scaled_to_zero"}}
                self._json(503, error, {"Retry-After": str(wait)})

            def _refused(self, method: str) -> bool:
                try:
                    guard.check(method, self.headers)
                except Refused as exc:
                    self._json(exc.status, {"error": {"message": exc.reason}})
                    return True
                return False

            def _json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
                self._reply(status, json.dumps(body).encode(), "application/json", headers)

            def _reply(
                self, status: int, data: bytes, kind: str, headers: dict[str, str] | None = None
            ) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

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
        self._server.shutdown()
        self._server.server_close()
