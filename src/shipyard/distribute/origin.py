"""The origin: the durable object storage an artifact was put into, read-only for peers.

Any store URI works (`file://`, a plain path, `s3://`); `http://BASE` reads the same key layout
from a static HTTP server in front of a store directory, which is how the benchmark puts the
origin behind a shaped link. Reads are blocking; the daemon runs them in worker threads.
"""

import urllib.error
import urllib.request
from typing import Protocol

from shipyard.errors import NotFound, StorageError
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
    def __init__(self, base: str, timeout: float = 10.0) -> None:
        self.base = base.rstrip("/")
        self.timeout = timeout

    def get(self, key: str) -> bytes:
        url = f"{self.base}/{key}"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout) as reply:
                data: bytes = reply.read()
                return data
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                raise NotFound(f"origin has no {key!r} ({url})") from None
            raise StorageError(f"origin {url}: HTTP {exc.code}") from None
        except (OSError, urllib.error.URLError) as exc:
            raise StorageError(f"origin {url}: {exc}") from None


def open_origin(uri: str) -> Origin:
    if uri.startswith(("http://", "https://")):
        return HttpOrigin(uri)
    return BackendOrigin(open_backend(uri))
