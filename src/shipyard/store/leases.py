"""Mutual exclusion between puts and garbage collection, through the backend itself.

A put may skip writing a piece because it already exists; if a concurrent collection deleted that
piece after the check, the new manifest would point at nothing. So puts and collections exclude each
other with lease objects under `leases/`: each side first writes its own lease, then lists the
others' (a Dekker-style handshake). With a backend whose listing is read-after-write consistent (a
local directory, S3 since 2020) at least one side sees the other and backs off, so a collection
never overlaps a put. Many puts may run at once. A lease not refreshed for `ttl` seconds belongs to
a dead process and is ignored (and removed by the next collection).
"""

import json
import os
import random
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

from shipyard.errors import Conflict
from shipyard.store.backend import Backend

LEASES = "leases/"
DEFAULT_TTL = 600.0

LeaseKind = Literal["put", "gc"]


class Lease:
    """One held lease; a long put calls `refresh` so its lease never goes stale."""

    def __init__(self, backend: Backend, kind: LeaseKind, ttl: float) -> None:
        self.backend = backend
        self.key = f"{LEASES}{kind}-{uuid.uuid4().hex}"
        self.ttl = ttl
        self.written_at = 0.0

    def write(self) -> None:
        body = json.dumps({"pid": os.getpid(), "host": os.uname().nodename, "at": time.time()})
        self.backend.put(self.key, body.encode())
        self.written_at = time.monotonic()

    def refresh(self) -> None:
        if time.monotonic() - self.written_at > self.ttl / 3:
            self.write()

    def release(self) -> None:
        self.backend.delete(self.key)


def live_leases(backend: Backend, kind: LeaseKind, ttl: float) -> Iterator[str]:
    """Keys of leases of `kind` refreshed within `ttl` seconds."""
    now = time.time()
    for info in backend.list(f"{LEASES}{kind}-"):
        if now - info.mtime < ttl:
            yield info.key


@contextmanager
def put_lease(backend: Backend, ttl: float = DEFAULT_TTL, wait: float = 60.0) -> Iterator[Lease]:
    """Hold a put lease; wait up to `wait` seconds for a running collection to finish."""
    deadline = time.monotonic() + wait
    lease = Lease(backend, "put", ttl)
    while True:
        lease.write()
        if not any(live_leases(backend, "gc", ttl)):
            break
        lease.release()
        if time.monotonic() > deadline:
            raise Conflict("garbage collection is running on this store; retry the put later")
        time.sleep(random.uniform(0.05, 0.5))
    try:
        yield lease
    finally:
        lease.release()


@contextmanager
def gc_lease(backend: Backend, ttl: float = DEFAULT_TTL) -> Iterator[Lease]:
    """Hold the collection lease, or raise `Conflict` when a put or another collection is live."""
    lease = Lease(backend, "gc", ttl)
    lease.write()
    busy = [k for k in live_leases(backend, "put", ttl)]
    busy += [k for k in live_leases(backend, "gc", ttl) if k != lease.key]
    if busy:
        lease.release()
        raise Conflict(f"cannot collect garbage: {len(busy)} put(s) or collection(s) are running")
    try:
        yield lease
    finally:
        lease.release()
