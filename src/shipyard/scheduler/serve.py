"""Run the live service: the HTTP API in a thread, the scheduling loop in the caller's thread."""

import json
import signal
import sys
import threading
from pathlib import Path

from shipyard.errors import InvalidInput, StorageError
from shipyard.httpguard import Guard, is_loopback, token_path
from shipyard.httpguard.asgi import start_server
from shipyard.scheduler.api import create_app
from shipyard.scheduler.backend import Backend
from shipyard.scheduler.config import ClusterConfig
from shipyard.scheduler.service import Service
from shipyard.scheduler.store import JobStore


def serve(
    config: ClusterConfig,
    store: JobStore,
    backend: Backend,
    home: Path,
    host: str = "127.0.0.1",
    port: int = 8642,
    tick: float = 0.5,
    stop: threading.Event | None = None,
    allow_remote: bool = False,
) -> None:
    """Serve until `stop` is set or SIGTERM/SIGINT arrives; running jobs are stopped on exit.

    The token and audit log live under `home`; a host other than loopback needs `allow_remote`.
    """
    if not is_loopback(host):
        if not allow_remote:
            raise InvalidInput(
                f"--host {host} is reachable from other machines; add --allow-remote to mean it"
            )
        print(
            f"warning: serving on {host}, beyond this machine: anyone who can reach the port "
            "can read the queue, and anyone with the token can run commands",
            file=sys.stderr,
            flush=True,
        )
    guard = Guard.start("scheduler", home, host)
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    service = Service(config, store, backend)
    lock = threading.Lock()
    try:
        server = start_server(create_app(service, lock, guard), host, port, "scheduler-api")
    except StorageError:
        service.backend.shutdown()
        raise
    url = f"http://{f'[{host}]' if ':' in host else host}:{server.port}"
    print(f"scheduler serving on {url} (token in {token_path('scheduler', home)})", flush=True)
    try:
        while not stop.is_set():
            with lock:
                try:
                    service.tick()
                except StorageError as exc:  # a busy or restarting database: try again next tick
                    print(json.dumps({"event": "tick-error", "error": str(exc)}), file=sys.stderr)
            stop.wait(tick)
    finally:
        server.stop()
        service.backend.shutdown()
