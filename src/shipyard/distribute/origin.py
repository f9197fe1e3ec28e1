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


class BackendOrigin:
    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def get(self, key: str) -> bytes:
        return self.backend.get(key)


class HttpOrigin:
    """GETs over kept-alive HTTP/1.1 connections, one per worker thread: a fresh connection per
    piece would pay a handshake and TCP slow start on the origin's link every time."""

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
        self._local = threading.local()

    def get(self, key: str) -> bytes:
        url = f"{self.base}/{key}"
        for attempt in (1, 2):
            connection, reused = self._connection()
            try:
                connection.request("GET", f"{self._path}/{key}")
                reply = connection.getresponse()
                data = reply.read()
            except (OSError, http.client.HTTPException) as exc:
                self._drop()
                if reused and attempt == 1:
                    continue  # the server closed a kept-alive connection meanwhile
                raise StorageError(f"origin {url}: {exc!r}") from None
            if reply.will_close:
                self._drop()
            if reply.status == 404:
                raise NotFound(f"origin has no {key!r} ({url})")
            if reply.status != 200:
                raise StorageError(f"origin {url}: HTTP {reply.status}")
            return data
        raise AssertionError("unreachable: the second attempt returns or raises")

    def _connection(self) -> tuple[http.client.HTTPConnection, bool]:
        """This thread's connection, and whether it has been used before."""
        connection: http.client.HTTPConnection | None = getattr(self._local, "connection", None)
        if connection is not None:
            return connection, True
        connection = self._connection_class(self._netloc, timeout=self.timeout)
        self._local.connection = connection
        return connection, False

    def _drop(self) -> None:
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
            self._local.connection = None


def open_origin(uri: str) -> Origin:
    if uri.startswith(("http://", "https://")):
        return HttpOrigin(uri)
    return BackendOrigin(open_backend(uri))
