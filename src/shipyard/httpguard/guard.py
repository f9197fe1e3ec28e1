"""Who may change state, and from where: the rules every Shipyard HTTP service applies.

Rules (docs/scheduler.md, "Security"):

- Every request's `Host` must name this server: a loopback name or address, the bound host,
  `extra_hosts`, or (on a wildcard bind) this machine's name or any IP literal. Anything else
  (`Host: evil.example`, a DNS-rebinding page) gets 421, GETs included.
- A mutation (POST, PUT, PATCH, DELETE) needs an `Origin`, if sent, equal to `http://<Host>`
  (403), `Authorization: Bearer <token>` (401) and `Content-Type: application/json` (415). So a
  web page cannot start anything: it cannot read the token, and a cross-origin `text/plain`
  POST is refused before its body is read. A read that returns users' data (a mirrored prompt
  log, job commands) is marked private and needs the token too.
- Inference endpoints (replica, router, activator) need no token but apply the same `Host`,
  `Origin` and `Content-Type` rules (`check_inference`), and the deployment's API keys
  (`apikeys`) when it has any.
- A body is at most `max_body` bytes (413), declared by `Content-Length` (411 without it), and
  must be one JSON object (400 for anything else, `NaN`, or nesting too deep to parse).
- Each mutation and each refusal appends one JSON line (time, service, method, path, client,
  status) to `<home>/audit/<service>.log` and to the `shipyard.audit` logger; a query parameter
  named like a credential (`token`, `api_key`, ...) and the service's token are written as
  `[redacted]`. Headers are never logged.

The token is made on first start into `<home>/tokens/<service>.token` (mode 0600, directory
0700) and reused after. It is read through `shipyard.secretfile`, the rules key files share: a
token file or directory that others may read or write, that another user owns, or that is a
symlink, and a token "file" that is a FIFO or device, are refused by name.

Use: refuse a non-loopback bind unless the user asked for it (`is_loopback(host)`), then
`Guard.start(service, home, bound_host)` once and put `shipyard.httpguard.asgi.guard_middleware`
in front of the FastAPI app. Another framework calls `guard.check(method, headers)`,
`guard.read_json(headers, read)` and `guard.audit(...)` per request, answering a `Refused` with
its `status`; `headers` is anything whose `items()` gives (name, value) pairs, repeats included.
"""

import hmac
import ipaddress
import json
import logging
import os
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote_plus

from shipyard.errors import StorageError
from shipyard.secretfile import read_private_file, write_private_file

MAX_BODY = 1 << 20
MUTATIONS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "127.0.0.1", "::1"})
_WILDCARDS = frozenset({"", "0.0.0.0", "::"})
_SINGLE = ("host", "origin", "authorization", "content-type", "content-length")
_MIN_TOKEN, _MAX_TOKEN = 32, 512
# A host name or an IPv4 literal, or a bracketed IPv6 literal, then an optional port.
_HOST = re.compile(r"(?P<name>[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")
# Query parameters whose values are credentials: never written to the audit log.
_SECRET_PARAM = re.compile(r"token|key|secret|passw|auth|sig|credential|session", re.IGNORECASE)
audit_log = logging.getLogger("shipyard.audit")


class Refused(Exception):
    """A request the guard turns away: `status` is the HTTP code, `reason` says why."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class Headers(Protocol):
    def items(self) -> Iterable[tuple[str, Any]]: ...


def is_loopback(host: str) -> bool:
    """Whether binding `host` keeps a service on this machine."""
    name = host.strip("[]").lower()
    if name in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


# Tokens


def token_path(service: str, home: Path) -> Path:
    return home / "tokens" / f"{service}.token"


def read_token(service: str, home: Path) -> str:
    """The service's token; refuses a missing, unsafe or malformed token file by name."""
    path = token_path(service, home)
    if not path.is_symlink() and not path.exists():
        raise StorageError(
            f"token file {path} does not exist: has the {service} been started with this "
            "SHIPYARD_HOME?"
        )
    raw = read_private_file(path, "token file", _MAX_TOKEN + 2)
    token = raw.decode("ascii", "replace").strip()
    if not _MIN_TOKEN <= len(token) <= _MAX_TOKEN or not re.fullmatch(r"[A-Za-z0-9_-]+", token):
        raise StorageError(
            f"token file {path}: expected {_MIN_TOKEN} to {_MAX_TOKEN} URL-safe characters; "
            "remove it for a new token"
        )
    return token


def load_or_create_token(service: str, home: Path) -> str:
    """The service's token, made on first start (written whole, then linked into place)."""
    path = token_path(service, home)
    if not path.exists() and not path.is_symlink():
        token = secrets.token_urlsafe(32) + "\n"
        write_private_file(path, token.encode(), replace=False)
    return read_token(service, home)


# The guard


@dataclass
class Guard:
    service: str
    token: str
    bound_host: str
    audit_path: Path | None = None
    max_body: int = MAX_BODY
    extra_hosts: frozenset[str] = frozenset()
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _names: frozenset[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # Names this machine answers to, looked up once (getfqdn may ask DNS).
        wildcard = self.bound_host in _WILDCARDS
        self._names = self.extra_hosts | {self.bound_host.lower()} - _WILDCARDS
        if wildcard:
            self._names |= {socket.gethostname().lower(), socket.getfqdn().lower()}

    @classmethod
    def start(cls, service: str, home: Path, bound_host: str, **options: Any) -> "Guard":
        """The guard for `service` bound to `bound_host`, with its token and audit log."""
        token = load_or_create_token(service, home)
        return cls(service, token, bound_host, home / "audit" / f"{service}.log", **options)

    def allows_host(self, header: str) -> bool:
        """Whether a `Host` header names this server (no port check: tunnels change ports)."""
        match = _HOST.fullmatch(header)
        if not match:
            return False
        name = match["name"].strip("[]").lower()
        if is_loopback(name) or name in self._names:
            return True
        if self.bound_host not in _WILDCARDS:
            return False
        # An IP literal cannot be rebound to another address, unlike a name a page controls.
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return False
        return True

    def check(self, method: str, headers: Headers, *, private_read: bool = False) -> None:
        """Refuse a request whose headers break a rule; the body is not read yet. A read with
        `private_read` (one that returns users' data) needs the token as a change does."""
        seen = self._same_site(method, headers)
        if method in MUTATIONS or private_read:
            scheme, _, presented = seen.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                presented.strip().encode("utf-8", "replace"), self.token.encode()
            ):
                raise Refused(401, f"a bearer token is required (see {self.service}.token)")
        if method in MUTATIONS:
            _json_only(seen)

    def check_inference(self, method: str, headers: Headers) -> None:
        """The rules of an inference endpoint (replica, router, activator alike): no service
        token, but `Host` always and, for a POST, same origin and JSON, so a page's `no-cors`
        `text/plain` POST is refused (403/415) before its body is read or counted."""
        seen = self._same_site(method, headers)
        if method in MUTATIONS:
            _json_only(seen)

    def _same_site(self, method: str, headers: Headers) -> dict[str, str]:
        """The header map, once `Host` names this server and a change's `Origin` matches it."""
        seen = _header_map(headers)
        host = seen.get("host", "")
        if not self.allows_host(host):
            raise Refused(421, f"Host {host[:100]!r} is not this server")
        origin = seen.get("origin")
        if method in MUTATIONS and origin is not None and origin != f"http://{host}":
            raise Refused(403, f"cross-origin request from {origin[:100]!r} refused")
        return seen

    def read_json(self, headers: Headers, read: Callable[[int], bytes]) -> dict[str, Any]:
        """The request body as one JSON object (`{}` when empty), read with `read(n)`."""
        seen = _header_map(headers)
        if "transfer-encoding" in seen:
            raise Refused(411, "send the body with a Content-Length, not chunked")
        declared = seen.get("content-length", "0").strip()
        if not declared.isdigit() or len(declared) > 18:
            raise Refused(400, f"Content-Length {declared[:30]!r} is not a byte count")
        length = int(declared)
        if length > self.max_body:
            raise Refused(413, f"body of {length} bytes is over the {self.max_body}-byte limit")
        try:
            raw = read(length) if length else b""
        except OSError as exc:  # the client went away or stalled past the timeout
            raise Refused(400, f"body: read failed ({exc})") from None
        if len(raw) != length:
            raise Refused(400, f"body ended after {len(raw)} of {length} bytes")
        if not raw:
            return {}
        try:
            body = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
        except RecursionError:
            raise Refused(400, "body: JSON nested too deep") from None
        except (UnicodeDecodeError, ValueError) as exc:
            raise Refused(400, f"body: not JSON ({str(exc)[:100]})") from None
        if not isinstance(body, dict):
            raise Refused(400, f"body: expected a JSON object, not {type(body).__name__}")
        return body

    def redacted(self, target: str) -> str:
        """`target` (path and query) fit for a log: a query parameter named like a credential
        and this service's token, wherever it appears, are replaced by `[redacted]`."""
        path, sep, query = target.partition("?")
        shown = path + sep + _redact_query(query) if sep else path
        return shown.replace(self.token, "[redacted]") if self.token else shown

    def audit(self, method: str, path: str, client: str, status: int, reason: str = "") -> None:
        """Append one JSON line for a mutation or a refusal."""
        record = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "service": self.service,
            "method": method,
            "path": self.redacted(path)[:1000],
            "client": client,
            "status": status,
        }
        if reason:
            record["reason"] = reason
        line = json.dumps(record)
        audit_log.info(line)
        if self.audit_path is None:
            return
        try:
            with self._lock:
                self.audit_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                fd = os.open(self.audit_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                with os.fdopen(fd, "a") as file:
                    file.write(line + "\n")
        except OSError as exc:  # a full disk must not take the service down; say it loudly
            audit_log.error("audit log %s not written (%s): %s", self.audit_path, exc, line)


def _json_only(seen: dict[str, str]) -> None:
    media = seen.get("content-type", "").partition(";")[0].strip().lower()
    if media != "application/json":
        raise Refused(415, f"Content-Type must be application/json, not {media[:60]!r}")


def _redact_query(query: str) -> str:
    pairs = []
    for pair in query.split("&"):
        name, sep, value = pair.partition("=")
        secret = _SECRET_PARAM.search(unquote_plus(name)) and value
        pairs.append(f"{name}{sep}{'[redacted]' if secret else value}")
    return "&".join(pairs)


def _header_map(headers: Headers) -> dict[str, str]:
    """Lower-cased header names; a repeated security header is ambiguous, so refused."""
    out: dict[str, str] = {}
    for name, value in headers.items():
        key = name.lower()
        if key in out and key in _SINGLE:
            raise Refused(400, f"header {name} sent twice")
        out[key] = str(value)
    return out


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")
