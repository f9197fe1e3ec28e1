"""`shipyard sandbox serve`: the manager behind a Unix socket, so many drivers share one pool.

The socket is `<home>/sandbox/sandbox.sock` in a directory only the service's user may enter: who
can connect can run code as the sandbox user, so the file system's permissions are the gate. One
service per home (a lock file says so). Frames are the agent's wire format; a request is
`{"op": ..., ...}`, a reply is the result or `{"error": message, "code": exit code}`.
Optionally Prometheus metrics on loopback HTTP (`GET /metrics`, behind `shipyard.httpguard`).
"""

import base64
import contextlib
import fcntl
import logging
import os
import socketserver
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from shipyard.errors import Conflict, InvalidInput, ShipyardError
from shipyard.httpguard import Guard, is_loopback
from shipyard.httpguard.asgi import BackgroundServer, guard_middleware, json_errors, start_server
from shipyard.prometheus import snapshot_registry
from shipyard.sandbox import protocol
from shipyard.sandbox.limits import Limits
from shipyard.sandbox.manager import FAMILIES, Manager
from shipyard.sandbox.wire import WireError, recv_msg, send_msg

MAX_REQUEST = 96 << 20  # a put of the largest file set, base64-encoded
log = logging.getLogger("shipyard.sandbox")


def socket_path(home: Path) -> Path:
    return home / "sandbox" / "sandbox.sock"


def _files(raw: dict[str, str]) -> dict[str, bytes]:
    try:
        return {path: base64.b64decode(data, validate=True) for path, data in raw.items()}
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"put: file data is not base64 ({exc})") from None


def _stdin(raw: str) -> bytes:
    try:
        return base64.b64decode(raw, validate=True)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"exec: stdin is not base64 ({exc})") from None


def handle(manager: Manager, request: dict[str, Any]) -> Any:
    """One request → its reply; errors as Shipyard's own (the caller turns them into replies)."""
    op, fields = protocol.checked(request)
    if op == "create":
        limits = Limits.from_json(fields.get("limits"))
        image = fields.get("image", "host")
        return manager.create(image, limits, fields.get("ttl_s"), fields.get("lease_s"))
    if op == "exec":
        result = manager.exec(
            fields["id"],
            fields["argv"],
            stdin=_stdin(fields.get("stdin", "")),
            timeout=fields.get("timeout", 10.0),
            env=fields.get("env"),
            cwd=fields.get("cwd", "/work"),
        )
        return result.to_json()
    if op == "put":
        mode = fields.get("mode", 0o644)
        if not 0 <= mode <= 0o777:
            raise InvalidInput(f"put: mode must be a permission number, not {mode!r}")
        manager.sandbox(fields["id"]).put_files(_files(fields["files"]), mode)
        return {}
    if op == "get":
        budget = fields.get("max_bytes")
        if budget is not None and budget < 0:
            raise InvalidInput(f"get: max_bytes {budget} is negative")
        got = manager.sandbox(fields["id"]).get_files(fields["paths"], budget)
        return {"files": {path: base64.b64encode(data).decode() for path, data in got.items()}}
    if op == "heartbeat":
        return {"gone": manager.heartbeat(fields["ids"])}
    if op == "close":
        manager.close(fields["id"])
        return {}
    if op == "status":
        return manager.status()
    return {"text": generate_latest(_registry(manager)).decode()}  # metrics


def _registry(manager: Manager) -> Any:
    return snapshot_registry(FAMILIES, manager.samples)


class _Handler(socketserver.BaseRequestHandler):
    server: "_Server"

    def handle(self) -> None:
        while True:
            try:
                request = recv_msg(self.request, MAX_REQUEST)
            except (OSError, WireError):
                return  # the driver went away or broke the format: drop the connection
            try:
                reply = {"ok": handle(self.server.manager, request)}
            except ShipyardError as exc:
                reply = {"error": str(exc), "code": exc.exit_code}
            except Exception:  # a bug: log it, tell the client no more than that
                log.exception("sandbox request %s failed", str(request.get("op"))[:40])
                reply = {"error": "internal error (see the service's log)", "code": 1}
            try:
                send_msg(self.request, reply)
            except OSError:
                return


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    manager: Manager


def _metrics_server(manager: Manager, listen: str, home: Path) -> BackgroundServer:
    host, _, port = listen.rpartition(":")
    if not is_loopback(host) or not port.isdigit():
        raise InvalidInput(f"--metrics-listen {listen!r}: expected a loopback HOST:PORT")
    guard = Guard.start("sandbox", home, host)
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    json_errors(app, guard.service)

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(_registry(manager)), media_type=CONTENT_TYPE_LATEST)

    app.middleware("http")(guard_middleware(guard))
    return start_server(app, host, int(port), "sandbox-metrics")


def serve(
    home: Path,
    make_manager: Callable[[], Manager],
    metrics_listen: str | None = None,
    on_ready: Callable[[Manager, Path], None] | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Serve until `stop` is set (or forever); one service per home."""
    folder = home / "sandbox"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    folder.chmod(0o700)
    lock = os.open(folder / "service.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock)
        raise Conflict(
            f"a sandbox service already runs for {home} (lock {folder}/service.lock)"
        ) from None
    path = socket_path(home)
    path.unlink(missing_ok=True)  # left by a service that died: the lock proves none runs
    manager = make_manager()
    try:
        metrics = _metrics_server(manager, metrics_listen, home) if metrics_listen else None
    except BaseException:
        manager.shutdown()
        raise
    # Bound and listening under a temporary name, then renamed: the socket's path appears only
    # when a client can connect to it (and the metrics, if asked for, are served already).
    temp = path.with_name(f".{path.name}.{os.getpid()}")
    temp.unlink(missing_ok=True)
    server = _Server(str(temp), _Handler)
    server.manager = manager
    os.replace(temp, path)
    if on_ready:
        on_ready(manager, path)
    thread = threading.Thread(target=server.serve_forever, name="sandbox-serve", daemon=True)
    thread.start()
    try:
        (stop or threading.Event()).wait()
    finally:
        server.shutdown()
        server.server_close()
        if metrics:
            metrics.stop()
        manager.shutdown()
        path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            os.close(lock)
