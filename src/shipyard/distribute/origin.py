"""The origin: the durable object storage an artifact was put into, read-only for peers.

Any store URI works (`file://`, a plain path, `s3://`); `http://BASE` reads the same key layout
from a static HTTP server in front of a store directory, which is how the benchmark puts the
origin behind a shaped link. Reads are blocking; the daemon runs them in worker threads.
"""

import http.client
import threading
import urllib.parse
from typing import Protocol

from shipyard.errors import InvalidInput, NotFound, StorageError
from shipyard.store import open_backend
from shipyard.store.backend import Backend


class Origin(Protocol):
    def get(self, key: str) -> bytes:
        """The object's bytes, unverified; `NotFound` or `StorageError` on failure."""
        ...

    def warm(self) -> None:
        """Get ready for a `get` soon, if not ready already (blocking; failures are left to
        `get`)."""
        ...


class BackendOrigin:
    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def get(self, key: str) -> bytes:
        return self.backend.get(key)

    def warm(self) -> None:
        """Nothing to prepare: the backend connects as it needs to."""


class HttpOrigin:
    """GETs over kept-alive HTTP/1.1 connections, shared by the worker threads: a fresh
    connection per piece would pay a handshake and TCP slow start on the origin's link every
    time. `warm` opens one before the first request: once the origin's link is full, a new
    connection's handshake packets queue behind (or are dropped with) everyone's bulk data, and
    on the benchmark's rig a late-starting owner took up to the 10 s timeout to connect."""

    def __init__(self, base: str, timeout: float = 10.0) -> None:
        parsed = urllib.parse.urlsplit(base)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise InvalidInput(f"origin URL {base!r} is not http(s)://HOST[:PORT][/PATH]")
        self.base = base.rstrip("/")
        self._connection_class = (
            http.client.HTTPSConnection if parsed.scheme == "https" else http.client.HTTPConnection
        )
        self._netloc = parsed.netloc
        self._path = parsed.path.rstrip("/")
        self.timeout = timeout
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def get(self, key: str) -> bytes:
        url = f"{self.base}/{key}"
        for attempt in (1, 2):
            connection, reused = self._take()
            try:
                connection.request("GET", f"{self._path}/{key}")
                reply = connection.getresponse()
                data = reply.read()
            except (OSError, http.client.HTTPException) as exc:
                connection.close()
                if reused and attempt == 1:
                    continue  # the server closed a kept-alive connection meanwhile
                raise StorageError(f"origin {url}: {exc!r}") from None
            if reply.will_close:
                connection.close()
            else:
                self._give(connection)
            if reply.status == 404:
                raise NotFound(f"origin has no {key!r} ({url})")
            if reply.status != 200:
                raise StorageError(f"origin {url}: HTTP {reply.status}")
            return data
        raise AssertionError("unreachable: the second attempt returns or raises")

    def warm(self) -> None:
        with self._lock:
            if self._idle:
                return
        connection = self._new()
        try:
            connection.connect()
        except OSError:
            return  # `get` will try again and report the failure
        self._give(connection)

    def _take(self) -> tuple[http.client.HTTPConnection, bool]:
        """An idle connection (the most recently used), or a new one; and whether it is reused."""
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        return self._new(), False

    def _new(self) -> http.client.HTTPConnection:
        return self._connection_class(self._netloc, timeout=self.timeout)

    def _give(self, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            self._idle.append(connection)


def open_origin(uri: str) -> Origin:
    if uri.startswith(("http://", "https://")):
        return HttpOrigin(uri)
    return BackendOrigin(open_backend(uri))
