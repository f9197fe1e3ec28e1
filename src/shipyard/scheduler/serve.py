"""Run the live service: the HTTP API in a thread, the scheduling loop in the caller's thread."""

import json
import signal
import sqlite3
import sys
import threading

from shipyard.scheduler.api import make_server
from shipyard.scheduler.backend import Backend
from shipyard.scheduler.config import ClusterConfig
from shipyard.scheduler.service import Service
from shipyard.scheduler.store import JobStore


def serve(
    config: ClusterConfig,
    store: JobStore,
    backend: Backend,
    host: str = "127.0.0.1",
    port: int = 8642,
    tick: float = 0.5,
    stop: threading.Event | None = None,
) -> None:
    """Serve until `stop` is set or SIGTERM/SIGINT arrives; running jobs are stopped on exit."""
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    service = Service(config, store, backend)
    lock = threading.Lock()
    server = make_server(service, lock, host, port)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    print(f"scheduler serving on http://{host}:{server.server_address[1]}", flush=True)
    try:
        while not stop.is_set():
            with lock:
                try:
                    service.tick()
                except sqlite3.OperationalError as exc:  # a busy database: try again next tick
                    print(json.dumps({"event": "tick-error", "error": str(exc)}), file=sys.stderr)
            stop.wait(tick)
    finally:
        server.shutdown()
        service.backend.shutdown()
