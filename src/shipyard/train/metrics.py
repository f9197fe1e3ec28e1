"""Prometheus text exposition of a run's state, served over HTTP by the controller."""

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Sample = tuple[str, dict[str, str], float]

HELP = {
    "shipyard_train_step": "steps completed by the slowest rank",
    "shipyard_train_checkpoint_step": "step of the latest committed checkpoint",
    "shipyard_train_attempt": "current attempt (restarts so far)",
    "shipyard_train_failures_total": "failures, by kind",
    "shipyard_train_goodput_ratio": "productive step time over wall time",
    "shipyard_train_seconds": "wall time, by goodput bucket",
    "shipyard_train_rank_step_seconds": "last step time, per rank",
    "shipyard_train_rank_work_seconds": "last forward pass CPU time, per rank",
    "shipyard_train_stragglers_total": "stragglers flagged",
    "shipyard_train_young_daly_seconds": "Young/Daly optimal checkpoint interval",
}


def render(samples: list[Sample]) -> str:
    lines: list[str] = []
    seen: set[str] = set()
    for name, labels, value in samples:
        if name not in seen:
            seen.add(name)
            kind = "counter" if name.endswith("_total") else "gauge"
            lines += [f"# HELP {name} {HELP.get(name, name)}", f"# TYPE {name} {kind}"]
        text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        lines.append(f"{name}{{{text}}} {value}" if text else f"{name} {value}")
    return "\n".join(lines) + "\n"


class MetricsServer:
    """GET /metrics returns `render(collect())`."""

    def __init__(self, collect: Callable[[], list[Sample]], port: int = 0) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                body = render(collect()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
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
