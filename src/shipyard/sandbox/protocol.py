"""The service's requests: each op, the fields it reads and the JSON type each must have.

Every request comes from a client the service does not trust, so `checked` refuses a field of
the wrong type by name (InvalidInput) before any of it is used; the values' ranges and meanings
are checked where they are used (`Limits`, `Sandbox.exec`, the manager).
"""

from collections.abc import Callable
from typing import Any

from shipyard.errors import InvalidInput

_KINDS: dict[str, Callable[[Any], bool]] = {
    "text": lambda v: isinstance(v, str),
    "a list of texts": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
    "a number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "an integer": lambda v: type(v) is int,
    "an object": lambda v: isinstance(v, dict),
    "an object of texts": lambda v: (
        isinstance(v, dict) and all(isinstance(x, str) for x in v.values())
    ),
}

# op → field → (kind, required)
OPS: dict[str, dict[str, tuple[str, bool]]] = {
    "create": {
        "image": ("text", False),
        "limits": ("an object", False),
        "ttl_s": ("a number", False),
        "lease_s": ("a number", False),
    },
    "exec": {
        "id": ("text", True),
        "argv": ("a list of texts", True),
        "stdin": ("text", False),  # base64
        "timeout": ("a number", False),
        "env": ("an object of texts", False),
        "cwd": ("text", False),
    },
    "put": {
        "id": ("text", True),
        "files": ("an object of texts", True),
        "mode": ("an integer", False),
    },
    "get": {
        "id": ("text", True),
        "paths": ("a list of texts", True),
        "max_bytes": ("an integer", False),
    },
    "heartbeat": {"ids": ("a list of texts", True)},
    "close": {"id": ("text", True)},
    "status": {},
    "metrics": {},
}


def checked(request: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The request's op and the fields that op reads, once each has the right JSON type; an
    absent or null optional field is left out (the caller's default applies)."""
    op = request.get("op")
    if not isinstance(op, str) or op not in OPS:
        raise InvalidInput(f"unknown request {str(op)[:40]!r} (known: {', '.join(OPS)})")
    fields = {}
    for name, (kind, required) in OPS[op].items():
        value = request.get(name)
        if value is None:
            if required:
                raise InvalidInput(f"{op}: {name} is required ({kind})")
            continue
        if not _KINDS[kind](value):
            raise InvalidInput(f"{op}: {name} must be {kind}, not {_shown(value)}")
        fields[name] = value
    return op, fields


def _shown(value: Any) -> str:
    kind = {bool: "a boolean", int: "an integer", float: "a number", str: "text"}
    kind |= {list: "a list", dict: "an object"}
    return f"{kind.get(type(value), type(value).__name__)} {str(value)[:40]!r}"
