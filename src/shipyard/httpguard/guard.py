"""Who may change state, and from where: the rules every Shipyard HTTP service applies.

Rules (docs/scheduler.md, "Security"):

- Every request's `Host` must name this server: a loopback name or address, the bound host,
  `extra_hosts`, or (on a wildcard bind) this machine's name or any IP literal. Anything else
  (`Host: evil.example`, a DNS-rebinding page) gets 421, GETs included.
- A mutation (POST, PUT, PATCH, DELETE) needs an `Origin`, if sent, equal to `http://<Host>`
  (403), `Authorization: Bearer <token>` (401) and `Content-Type: application/json` (415). So a
  web page cannot start anything: it cannot read the token, and a cross-origin `text/plain`
  POST is refused before its body is read.
- A body is at most `max_body` bytes (413), declared by `Content-Length` (411 without it), and
  must be one JSON object (400 for anything else, `NaN`, or nesting too deep to parse).
- Each mutation and each refusal appends one JSON line (time, service, method, path, client,
  status) to `<home>/audit/<service>.log` and to the `shipyard.audit` logger.

The token is made on first start into `<home>/tokens/<service>.token` (mode 0600) and reused
after; a token file that others may read or write, or that another user owns, is refused.

Use: refuse a non-loopback bind unless the user asked for it (`is_loopback(host)`), then
`Guard.start(service, home, bound_host)` once and put `shipyard.httpguard.asgi.guard_middleware`
in front of the FastAPI app. Another framework calls `guard.check(method, headers)`,
`guard.read_json(headers, read)` and `guard.audit(...)` per request, answering a `Refused` with
its `status`; `headers` is anything whose `items()` gives (name, value) pairs, repeats included.
"""

import contextlib
import hmac
import ipaddress
import json
import logging
import os
import re
import secrets
import socket
import stat
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from shipyard.errors import StorageError

MAX_BODY = 1 << 20
MUTATIONS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "127.0.0.1", "::1"})
_WILDCARDS = frozenset({"", "0.0.0.0", "::"})
_SINGLE = ("host", "origin", "authorization", "content-type", "content-length")
_MIN_TOKEN, _MAX_TOKEN = 32, 512
# A host name or an IPv4 literal, or a bracketed IPv6 literal, then an optional port.
_HOST = re.compile(r"(?P<name>[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")
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
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise StorageError(
            f"token file {path} does not exist: has the {service} been started with this "
            "SHIPYARD_HOME?"
        ) from None
    except OSError as exc:  # ELOOP: a symlink, which another user could point anywhere
        raise StorageError(f"token file {path}: cannot open safely ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise StorageError(f"token file {path} is not a regular file")
        if info.st_uid != os.geteuid():
            raise StorageError(
                f"token file {path} is owned by uid {info.st_uid}, not by you "
                f"(uid {os.geteuid()}): remove it and restart the {service}"
            )
        if info.st_mode & 0o077:
            raise StorageError(
                f"token file {path} has mode {stat.S_IMODE(info.st_mode):04o}: others may read "
                f"it; run `chmod 600 {path}` (or remove it for a new token)"
            )
        raw = file.read(_MAX_TOKEN + 2)
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
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "w") as file:
                file.write(secrets.token_urlsafe(32) + "\n")
                file.flush()
                os.fsync(file.fileno())
            with contextlib.suppress(FileExistsError):  # another process made one meanwhile
                os.link(temp, path)  # a link never replaces it
        finally:
            temp.unlink()
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

    def check(self, method: str, headers: Headers) -> None:
        """Refuse a request whose headers break a rule; the body is not read yet."""
        seen = _header_map(headers)
        host = seen.get("host", "")
        if not self.allows_host(host):
            raise Refused(421, f"Host {host[:100]!r} is not this server")
        if method not in MUTATIONS:
            return
        origin = seen.get("origin")
        if origin is not None and origin != f"http://{host}":
            raise Refused(403, f"cross-origin request from {origin[:100]!r} refused")
        scheme, _, presented = seen.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            presented.strip().encode("utf-8", "replace"), self.token.encode()
        ):
            raise Refused(401, f"a bearer token is required (see {self.service}.token)")
        media = seen.get("content-type", "").partition(";")[0].strip().lower()
        if media != "application/json":
            raise Refused(415, f"Content-Type must be application/json, not {media[:60]!r}")

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

    def audit(self, method: str, path: str, client: str, status: int, reason: str = "") -> None:
        """Append one JSON line for a mutation or a refusal."""
        record = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "service": self.service,
            "method": method,
            "path": path[:1000],
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
