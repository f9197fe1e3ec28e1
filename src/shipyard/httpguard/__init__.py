"""The guard in front of every Shipyard HTTP service: who may change state, and from where.

`guard` holds the rules (docs/scheduler.md, "Security"), `asgi` applies them to a FastAPI app
and runs it, `client` is the other side. Every service is built the same way: refuse a
non-loopback bind unless asked for (`is_loopback`), `Guard.start(service, home, host)`,
`guard_middleware` and `json_errors` on the app, `start_server` (or uvicorn) to serve it.
"""

from shipyard.httpguard.client import call
from shipyard.httpguard.guard import (
    MAX_BODY,
    MUTATIONS,
    Guard,
    Refused,
    is_loopback,
    load_or_create_token,
    read_token,
    token_path,
)

__all__ = [
    "MAX_BODY",
    "MUTATIONS",
    "Guard",
    "Refused",
    "call",
    "is_loopback",
    "load_or_create_token",
    "read_token",
    "token_path",
]
