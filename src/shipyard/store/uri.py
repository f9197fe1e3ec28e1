"""Turn a store URI into a backend: `file:///path`, a plain path, or `s3://bucket/prefix`."""

from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

from shipyard.errors import InvalidInput
from shipyard.store.backend import Backend
from shipyard.store.local import LocalBackend
from shipyard.store.s3 import S3Backend


def open_backend(uri: str) -> Backend:
    """The backend a URI names. S3 takes `?endpoint=http://host:port` for non-AWS servers."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return LocalBackend(Path(unquote(parsed.path) if parsed.scheme else uri))
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise InvalidInput(f"store URI {uri!r} names no bucket: use s3://BUCKET/PREFIX")
        endpoint = parse_qs(parsed.query).get("endpoint", [None])[0]
        return S3Backend(parsed.netloc, parsed.path, endpoint_url=endpoint)
    raise InvalidInput(f"store URI {uri!r}: unknown scheme {parsed.scheme!r} (allowed: file, s3)")
