"""The stand-in replica of a deployment scaled to zero: it answers 503 with Retry-After, and counts.

The router needs at least one replica per version, so a deployment at zero replicas is registered
with this one. Each request it turns away is the demand signal that wakes the deployment: the
controller reads `take_waiting()` every tick and starts a replica, and the client retries after
`Retry-After` seconds (the last measured replica start, rounded up). It binds loopback only.
"""

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Activator:
    def __init__(self, model: str) -> None:
        self.model = model
        self.retry_after_s = 5.0
        self._waiting = 0
        self._lock = threading.Lock()
        activator = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/health":
                    self._reply(200, activator.health())
                elif self.path == "/v1/models":
                    self._reply(200, {"object": "list", "data": [{"id": activator.model}]})
                else:
                    self._reply(404, {"error": {"message": f"no route {self.path[:80]!r}"}})

            def do_POST(self) -> None:
                length = self.headers.get("Content-Length", "0")
                if length.isdigit() and int(length) <= 1 << 20:
                    self.rfile.read(int(length))
                activator.note_request()
                wait = max(1, math.ceil(activator.retry_after_s))
                message = (
                    f"deployment {activator.model!r} is scaled to zero; a replica is starting: "
                    f"retry after {wait} s"
                )
                self._reply(503, {"error": {"message": message, "type": "scaled_to_zero"}}, wait)

            def _reply(self, status: int, body: Any, retry_after: int | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if retry_after is not None:
                    self.send_header("Retry-After", str(retry_after))
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

    def note_request(self) -> None:
        with self._lock:
            self._waiting += 1

    def take_waiting(self) -> int:
        """Requests turned away since the last call."""
        with self._lock:
            waiting, self._waiting = self._waiting, 0
        return waiting

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
