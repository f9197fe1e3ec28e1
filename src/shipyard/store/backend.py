"""The one interface every storage backend implements: stat, get, put, list, delete.

Keys are slash-separated relative names (`pieces/ab/ab12...`, `manifests/<id>`). A backend knows
nothing of hashes or manifests; it moves bytes atomically. Adding a backend means writing one class
with these five methods and teaching `open_backend` its URI scheme.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class ObjectInfo:
    """What a backend knows about one stored object."""

    key: str
    size: int
    mtime: float


class Backend(Protocol):
    """Atomic object storage. `put` is all-or-nothing: readers see the old object or the new one."""

    @property
    def uri(self) -> str:
        """Where this backend stores its objects, as a URI `open_backend` accepts."""
        ...

    def stat(self, key: str) -> ObjectInfo | None:
        """The object's size and modification time, or None when it does not exist."""
        ...

    def get(self, key: str) -> bytes:
        """The object's bytes; raises `NotFound` when it does not exist."""
        ...

    def put(self, key: str, data: bytes | memoryview) -> None:
        """Store `data` under `key` atomically, replacing any previous object."""
        ...

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Every object whose key starts with `prefix`, in no particular order."""
        ...

    def delete(self, key: str) -> None:
        """Remove the object; deleting a missing key is not an error."""
        ...
