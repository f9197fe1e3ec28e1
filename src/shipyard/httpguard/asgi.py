"""The guard on Shipyard's one HTTP stack (FastAPI on uvicorn), and a server to run it in.

`guard_middleware(guard)` checks every request before any route sees it and leaves a mutation's
JSON body in `request.state.body`; `json_errors(app)` answers Shipyard's errors and FastAPI's
validation errors as `{"error": message}`; `start_server(app, host, port)` serves an app from a
background thread (the scheduler's loop and the sandbox's socket server keep the main one).
"""

import logging
import socket
import threading
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp

from shipyard.errors import Conflict, InvalidInput, NotFound, ShipyardError, StorageError
from shipyard.httpguard.guard import MUTATIONS, Guard, Refused

STATUS = {InvalidInput: 400, NotFound: 404, Conflict: 409}
Next = Callable[[Request], Awaitable[Response]]


async def _bounded_body(request: Request, limit: int) -> bytes:
    """At most `limit + 1` bytes: enough for the guard to see an over-long body, no more."""
    chunks, size = [], 0
    async for chunk in request.stream():
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            break
    return b"".join(chunks)


def guard_middleware(
    guard: Guard, private_reads: Callable[[str], bool] | None = None
) -> Callable[[Request, Next], Awaitable[Response]]:
    """Register with `app.middleware("http")(...)` last, so that it runs first. A GET whose
    path `private_reads` accepts (one returning users' prompts or output) needs the token."""

    async def check(request: Request, call_next: Next) -> Response:
        method = request.method
        headers = request.headers
        reason = ""
        try:
            private = private_reads is not None and private_reads(request.url.path)
            guard.check(method, headers, private_read=private)
            if method in MUTATIONS:
                raw = b""
                declared = headers.get("content-length", "")
                # Read only a body the guard would take: one declared too long, chunked or not
                # at all is refused from its headers, without waiting for bytes that may never
                # come.
                chunked = "transfer-encoding" in headers
                if not chunked and declared.isdigit() and int(declared) <= guard.max_body:
                    raw = await _bounded_body(request, guard.max_body)
                request.state.body = guard.read_json(headers, lambda n: raw[:n])
            response = await call_next(request)
        except Refused as exc:
            reason = exc.reason
            response = JSONResponse({"error": exc.reason}, status_code=exc.status)
            if exc.status == 401:
                response.headers["WWW-Authenticate"] = "Bearer"
        except Exception as exc:  # a bug below: audited and answered, never sent as a traceback
            response = JSONResponse(
                {"error": "internal error (see the service's log)"},
                status_code=error_status(exc, guard.service),
            )
        if method in MUTATIONS or reason:
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            client = request.client.host if request.client else "?"
            guard.audit(method, target, client, response.status_code, reason)
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response

    return check


def error_status(exc: Exception, service: str) -> int:
    """The HTTP status of an error an endpoint raised; a bug is logged and answered 500."""
    if isinstance(exc, ShipyardError):
        return STATUS.get(type(exc), 500)
    logging.getLogger(f"shipyard.{service}").error(traceback.format_exc())
    return 500


def validation_message(exc: RequestValidationError) -> str:
    """FastAPI's validation errors as one line naming each bad field."""
    where = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5])
    return f"bad request: {where}"


def json_errors(app: FastAPI, service: str) -> None:
    """Answer Shipyard's errors and invalid requests as `{"error": message}`."""

    @app.exception_handler(ShipyardError)
    async def shipyard_error(request: Request, exc: ShipyardError) -> Response:
        return JSONResponse({"error": str(exc)}, status_code=error_status(exc, service))

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> Response:
        return JSONResponse({"error": validation_message(exc)}, status_code=400)


@dataclass
class BackgroundServer:
    """A uvicorn server answering from a daemon thread."""

    server: uvicorn.Server
    thread: threading.Thread
    port: int

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def listen(host: str, port: int, backlog: int = 1024) -> socket.socket:
    """A listening socket on `host:port` (0: any free port); StorageError names a bind that
    fails. Binding before serving lets a service print its real port before it answers."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise StorageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def uvicorn_server(app: ASGIApp) -> uvicorn.Server:
    """Shipyard's uvicorn settings: quiet (mutations go to the audit log), bounded keep-alive."""
    config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_keep_alive=30)
    return uvicorn.Server(config)


def start_server(app: ASGIApp, host: str, port: int, name: str) -> BackgroundServer:
    """Bind `host:port` (0: any free port) and serve `app` from a thread; return once bound."""
    sock = listen(host, port)
    server = uvicorn_server(app)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=name, daemon=True)
    thread.start()
    return BackgroundServer(server, thread, sock.getsockname()[1])
