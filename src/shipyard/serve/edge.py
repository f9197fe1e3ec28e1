"""The edge of serving's HTTP processes (replica, activator): the Host rule, as pure ASGI.

Inference changes no stored state, so these services need no token: of `shipyard.httpguard`'s
rules only the `Host` check applies to every request (421 otherwise, GETs included, against DNS
rebinding). Pure ASGI (`app.add_middleware(HostCheck, ...)`), not an `http` middleware: a
streamed reply passes through untouched and a client that leaves is seen by the route at once.
"""

from collections.abc import Callable

from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shipyard.httpguard import Guard, Refused


class HostCheck:
    """Refuse a request whose Host is not this server with `refuse(status, reason)`; add
    `headers` to every response (refusals included)."""

    def __init__(
        self,
        app: ASGIApp,
        guard: Guard,
        refuse: Callable[[int, str], Response],
        headers: dict[str, str] | None = None,
    ) -> None:
        self.app, self.guard, self.refuse = app, guard, refuse
        self.extra = [
            (k.lower().encode("latin-1"), v.encode("latin-1", "replace"))
            for k, v in (headers or {}).items()
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start" and self.extra:
                message = {**message, "headers": [*message.get("headers", ()), *self.extra]}
            await send(message)

        try:
            self.guard.check("GET", Headers(scope=scope))  # the Host rule (and no repeats)
        except Refused as exc:
            await self.refuse(exc.status, exc.reason)(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)
