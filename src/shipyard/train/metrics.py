"""Prometheus text of a run's state, served over HTTP by the controller."""

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from shipyard.prometheus import Families, snapshot_registry
from shipyard.prometheus import Sample as Sample  # what the controller's samples are

FAMILIES: Families = {
    "shipyard_train_step": ("gauge", "steps completed by the slowest rank"),
    "shipyard_train_checkpoint_step": ("gauge", "step of the latest committed checkpoint"),
    "shipyard_train_attempt": ("gauge", "current attempt (restarts so far)"),
    "shipyard_train_failures_total": ("counter", "failures, by kind"),
    "shipyard_train_goodput_ratio": ("gauge", "productive step time over wall time"),
    "shipyard_train_seconds": ("gauge", "wall time, by goodput bucket"),
    "shipyard_train_rank_step_seconds": ("gauge", "last step time, per rank"),
    "shipyard_train_rank_work_seconds": ("gauge", "last forward pass CPU time, per rank"),
    "shipyard_train_stragglers_total": ("counter", "stragglers flagged"),
    "shipyard_train_young_daly_seconds": ("gauge", "Young/Daly optimal checkpoint interval"),
}


class MetricsServer:
    """GET /metrics returns the samples `collect()` lists at that moment, from a registry of its
    own (a process may run several controllers)."""

    def __init__(self, collect: Callable[[], list[Sample]], port: int = 0) -> None:
        registry = snapshot_registry(FAMILIES, collect)

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                body = generate_latest(registry)
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE_LATEST)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                """Scrapes are not logged: Prometheus polls every few seconds."""

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
