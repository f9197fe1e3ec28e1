"""`shipyard.httpguard`'s rules in front of the console, as one ASGI middleware.

Every request's Host is checked; a mutation also needs the console's bearer token, JSON and no
foreign Origin, and its body (one JSON object, at most `max_body` bytes) is parsed here and left
in `request.state.body`. Each mutation and each refusal is appended to the audit log.
"""

import logging
import traceback
from collections.abc import Awaitable, Callable

from fastapi import Request, Response
from fastapi.responses import JSONResponse

from shipyard.errors import Conflict, InvalidInput, NotFound, ShipyardError
from shipyard.httpguard import MUTATIONS, Guard, Refused

STATUS = {InvalidInput: 400, NotFound: 404, Conflict: 409}
log = logging.getLogger("shipyard.console")
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


def guard_middleware(guard: Guard) -> Callable[[Request, Next], Awaitable[Response]]:
    async def check(request: Request, call_next: Next) -> Response:
        method = request.method
        headers = request.headers
        reason = ""
        try:
            guard.check(method, headers)
            if method in MUTATIONS:
                raw = b""
                declared = headers.get("content-length", "")
                # Read only a body the guard would take: one declared too long, or not at all,
                # is refused from its headers, without waiting for bytes that may never come.
                if declared.isdigit() and int(declared) <= guard.max_body:
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
                {"error": "internal error (see the console's log)"},
                status_code=error_status(exc),
            )
        if method in MUTATIONS or reason:
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            client = request.client.host if request.client else "?"
            guard.audit(method, target, client, response.status_code, reason)
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response

    return check


def error_status(exc: Exception) -> int:
    """The HTTP status of an error an endpoint raised; a bug is logged and answered 500."""
    if isinstance(exc, ShipyardError):
        return STATUS.get(type(exc), 500)
    log.error(traceback.format_exc())
    return 500
