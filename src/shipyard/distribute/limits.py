"""What one daemon's listener lets a peer, or anyone who can reach its port, cost it.

- Connections: at most `DaemonConfig.max_connections` open. One beyond takes the place of the
  connection idle longest (waiting for its next request), so silent connections cost real peers
  a reconnect at most; with none idle, the newcomer is refused at once.
- Header bytes: each frame's header at most `wire.MAX_HEADER`, and all the headers being read at
  once at most `HEADER_BUDGET`, so half-sent headers cannot add up to more memory than that.
  A header must arrive whole within the idle timeout (slow senders are dropped), a connection
  stays open `KEEPALIVE` seconds between requests.
- Refusals are counted by reason in `shipyard_peer_requests_refused_total` and logged, one line
  per reason at most every `LOG_EVERY` seconds, so a flood cannot flood the log too.
"""

import asyncio
import math
import sys
import time
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
    """The open connections' handler tasks, and which of them wait idle for a request."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.open: set[asyncio.Task[None]] = set()
        self._idle: dict[asyncio.Task[None], None] = {}  # in the order they fell idle

    def admit(self, task: "asyncio.Task[None]") -> bool:
        """Count `task` in, closing the longest-idle connection to make room if need be; False
        when all are busy."""
        if len(self.open) >= self.cap:
            if not self._idle:
                return False
            oldest = next(iter(self._idle))
            self.leave(oldest)
            oldest.cancel()  # its handler ends quietly and closes the connection
        self.open.add(task)
        return True

    def idle(self, task: "asyncio.Task[None]", waiting: bool) -> None:
        if waiting:
            self._idle[task] = None
        else:
            self._idle.pop(task, None)

    def leave(self, task: "asyncio.Task[None]") -> None:
        self.open.discard(task)
        self._idle.pop(task, None)


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
