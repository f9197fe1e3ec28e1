"""The origin: the durable object storage an artifact was put into, read-only for peers.

Any store URI works (`file://`, a plain path, `s3://`); `http://BASE` reads the same key layout
from a static HTTP server in front of a store directory, which is how the benchmark puts the
origin behind a shaped link. Reads are blocking; the daemon runs them in worker threads.
"""

import http.client
import threading
import urllib.parse
from collections.abc import Callable
from typing import Protocol

from shipyard.errors import InvalidInput, NotFound, StorageError
from shipyard.store import open_backend
from shipyard.store.backend import Backend
from shipyard.store.partial import CHUNK, PieceSink


class Origin(Protocol):
    def get(self, key: str) -> bytes:
        """The object's bytes, unverified; `NotFound` or `StorageError` on failure."""
        ...

    def read_into(self, key: str, sink: PieceSink) -> None:
        """The object's bytes from `sink.kept` on, unverified, written to `sink` (from the first
        byte, after `sink.restart()`, where the origin cannot start elsewhere)."""
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

    def read_into(self, key: str, sink: PieceSink) -> None:
        data = memoryview(self.backend.get(key))
        if sink.kept > len(data):
            sink.restart()
        sink.write(data[sink.kept :])

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
        chunks: list[bytes] = []
        self._get(key, 0, lambda reply, _: chunks.append(reply.read()))
        return b"".join(chunks)

    def read_into(self, key: str, sink: PieceSink) -> None:
        """With a `Range` request when bytes are kept; a server that ignores it sends all."""

        def stream(reply: http.client.HTTPResponse, status: int) -> None:
            if status == 200 and sink.kept:
                sink.restart()
            buffer = memoryview(bytearray(CHUNK))
            while count := reply.readinto(buffer):
                sink.write(buffer[:count])

        self._get(key, sink.kept, stream)

    def _get(
        self, key: str, offset: int, read: Callable[[http.client.HTTPResponse, int], None]
    ) -> None:
        """GET `key` (from `offset`) and hand a good reply to `read` with its status."""
        url = f"{self.base}/{key}"
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        for attempt in (1, 2):
            connection, reused = self._take()
            reading = False
            try:
                connection.request("GET", f"{self._path}/{key}", headers=headers)
                reply = connection.getresponse()
                if _good(reply, offset):
                    reading = True
                    read(reply, reply.status)
                else:
                    reply.read()
            except (OSError, http.client.HTTPException) as exc:
                connection.close()
                if reused and attempt == 1 and not reading:
                    continue  # the server closed a kept-alive connection meanwhile
                raise StorageError(f"origin {url}: {exc!r}") from None
            except BaseException:  # the sink refused the bytes, say: the reply is cut off midway
                connection.close()
                raise
            if reply.will_close:
                connection.close()
            else:
                self._give(connection)
            if reply.status == 404:
                raise NotFound(f"origin has no {key!r} ({url})")
            if not reading:
                raise StorageError(f"origin {url}: HTTP {reply.status}")
            return
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


def _good(reply: http.client.HTTPResponse, offset: int) -> bool:
    """A whole object, or the part from `offset` that a `Range` request asked for."""
    if reply.status == 206:
        return str(reply.getheader("Content-Range", "")).startswith(f"bytes {offset}-")
    return reply.status == 200


def open_origin(uri: str) -> Origin:
    if uri.startswith(("http://", "https://")):
        return HttpOrigin(uri)
    return BackendOrigin(open_backend(uri))
