"""What one daemon's listener lets a peer, or anyone who can reach its port, cost it.

- Connections: at most `DaemonConfig.max_connections` open, and at most
  `max_connections_per_source` from one source (an IPv4 address, or an IPv6 /64: see
  `source_key`). A newcomer past either takes the place of the connection that has waited
  longest for its request's header to arrive whole (idle, or sending it slowly), its own
  source's when the source has its share; one whose header is in and is being served is never
  closed. So connections that trickle headers, from however many addresses, cost real peers a
  reconnect at most; with every connection in the way being served, the newcomer is refused.
- Header bytes: each frame's header at most `wire.MAX_HEADER`, and all the headers being read at
  once at most `HEADER_BUDGET`, so half-sent headers cannot add up to more memory than that.
  From its first byte, a request's head (length and header, or an HTTP head) must arrive whole
  within the idle timeout: one deadline for all of it, so a byte at a time buys nothing. A
  connection stays open `KEEPALIVE` seconds between requests.
- Refusals are counted by reason in `shipyard_peer_requests_refused_total` and logged, one line
  per reason at most every `LOG_EVERY` seconds, so a flood cannot flood the log too.
"""

import asyncio
import ipaddress
import math
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from shipyard.distribute.metrics import Metrics
from shipyard.distribute.swarm_key import SwarmKeyRefused
from shipyard.distribute.wire import MAX_HEADER, HeaderTooLarge, PeerBusy
from shipyard.errors import InvalidInput

HEADER_BUDGET = 16 * MAX_HEADER
KEEPALIVE = 20.0  # seconds an idle connection stays open for its next request
LOG_EVERY = 10.0


class Admission:
    """The open connections' handler tasks by source, and which of them wait for a request."""

    def __init__(self, cap: int, per_source: int, evicted: Callable[[str], None]) -> None:
        """`evicted(source)` is told of each connection closed to make room."""
        self.cap = cap
        self.per_source = per_source
        self.evicted = evicted
        self.open: dict[asyncio.Task[None], str] = {}  # each task's source
        self._sources: Counter[str] = Counter()
        # Tasks whose next request has not arrived whole, in the order they began waiting for it
        self._waiting: dict[asyncio.Task[None], None] = {}

    def admit(self, task: "asyncio.Task[None]", source: str) -> tuple[str, str] | None:
        """Count `task` in for `source`, closing the connection that has waited longest for
        its request to make room if need be; or say why not, as (reason, message), when every
        connection in the way is being served."""
        if self._sources[source] >= self.per_source and not self._evict(source):
            return "source", f"{source} has all {self.per_source} of its connections in use"
        if len(self.open) >= self.cap and not self._evict(None):
            return "connections", f"all {self.cap} connections are in use"
        self.open[task] = source
        self._sources[source] += 1
        return None

    def _evict(self, source: str | None) -> bool:
        """Close the longest waiting connection (of `source`, when given); False if none."""
        for task in self._waiting:
            if source is None or self.open[task] == source:
                self.evicted(self.open[task])
                self.leave(task)
                task.cancel()  # its handler ends quietly and closes the connection
                return True
        return False

    def waiting(self, task: "asyncio.Task[None]", waiting: bool) -> None:
        """Mark `task` as waiting for its next request's head, or as having it whole."""
        if waiting:
            self._waiting[task] = None
        else:
            self._waiting.pop(task, None)

    def leave(self, task: "asyncio.Task[None]") -> None:
        source = self.open.pop(task, None)
        if source is not None:
            self._sources[source] -= 1
            if not self._sources[source]:
                del self._sources[source]
        self._waiting.pop(task, None)


def source_key(peername: object) -> str:
    """What a connection's share is counted under: the peer's IPv4 address, or the /64 of an
    IPv6 one, since a single host is routinely given a whole /64 to draw addresses from."""
    if not isinstance(peername, tuple) or not peername or not isinstance(peername[0], str):
        return "unknown"
    try:
        address = ipaddress.ip_address(peername[0].split("%", 1)[0])  # no zone in a key
    except ValueError:  # not an IP socket's address: counted under its own name
        return peername[0]
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((int(address) >> 64 << 64, 64)))
    return str(address)


class HeaderBudget:
    """Bytes of headers being read now, on all connections together."""

    def __init__(self, total: int = HEADER_BUDGET) -> None:
        self.total = total
        self.used = 0

    @contextmanager
    def reserve(self, length: int) -> Iterator[None]:
        if self.used + length > self.total:
            raise PeerBusy(f"{self.used} bytes of headers are being read: try again shortly")
        self.used += length
        try:
            yield
        finally:
            self.used -= length


def reason(exc: BaseException) -> str:
    """The label a refusal is counted under."""
    if isinstance(exc, SwarmKeyRefused):
        return "swarm_key"
    if isinstance(exc, HeaderTooLarge):
        return "too_large"
    if isinstance(exc, PeerBusy):
        return "busy"
    if isinstance(exc, InvalidInput):
        return "malformed"
    return "error"


class Refusals:
    """Counts refused requests and connections, and logs a sample of them."""

    def __init__(
        self, me: str, metrics: Metrics, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.me = me
        self.metrics = metrics
        self.clock = clock
        self._logged: dict[str, float] = {}
        self._unlogged: dict[str, int] = {}

    def note(self, why: str, source: str, message: str) -> None:
        self.metrics.inc("shipyard_peer_requests_refused_total", reason=why)
        now = self.clock()
        if now - self._logged.get(why, -math.inf) < LOG_EVERY:
            self._unlogged[why] = self._unlogged.get(why, 0) + 1
            return
        self._logged[why] = now
        more = self._unlogged.pop(why, 0)
        tail = f" ({more} more refused for this since the last line)" if more else ""
        print(f"peer {self.me}: refused {source}: {message}{tail}", file=sys.stderr, flush=True)
