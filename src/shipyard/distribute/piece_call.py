"""One piece request as its reply comes in: how many bytes have come, whether it is below the
minimum rate, and how this host calls it off.

A reply's bytes are read a whole `CHUNK` per system call (see `transfer`), so the bytes read
lag behind those that have come: a 256 KiB read on a busy link can take seconds while bytes
flow all along. Held to the minimum rate by the bytes read alone, such a reply looked like a
trickle and was cut off, and its honest sender struck for slowness. So a reply's progress also
counts what the kernel has received on the connection since the reply's turn came (Linux's
`tcp_info`), where that is known.
"""

import socket
import struct
import threading
import time
from contextlib import suppress

from shipyard.distribute.wire import PeerUnavailable

# Seconds a reply may take before its average rate is held to the minimum: enough for a
# sender's thread on a starved host to be scheduled, short next to a trickle's cost.
RATE_GRACE = 1.5
_TCP_INFO_BYTES = 256  # room for `struct tcp_info` (Linux 4.1+: 136 bytes or more)
_BYTES_RECEIVED_AT = 128  # offset of its `tcpi_bytes_received` (u64)


class Aborted(PeerUnavailable):
    """This host called the request off (a twin stored the piece, the daemon is stopping)."""


class TooSlow(Exception):
    """A reply's bytes came slower than the call's minimum rate."""


class PieceCall:
    """One piece request; `abort()` may come from any thread, before or during the transfer.
    `active_since` is when its reply started to be read (None while it waits its turn), `got`
    the bytes read since. `min_rate` (bytes per second, 0: none) is the floor its average rate
    is held to once it has had `RATE_GRACE` seconds."""

    def __init__(self, min_rate: float = 0.0) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._kernel_base: int | None = None  # the connection's bytes received at `attach`
        self.aborted = False
        self.active_since: float | None = None
        self.got = 0
        self.min_rate = min_rate

    def attach(self, sock: socket.socket) -> None:
        with self._lock:
            if self.aborted:
                raise Aborted("request aborted")
            self._sock = sock
            self._kernel_base = kernel_bytes_received(sock)
            self.active_since = time.monotonic()

    def note(self, count: int) -> None:
        """`count` more bytes were read; raises `TooSlow` once the reply is below the floor."""
        self.got += count
        now = time.monotonic()
        if self.too_slow(now):
            raise TooSlow(f"{self.received()} bytes in {now - (self.active_since or now):.1f} s")

    def received(self) -> int:
        """Bytes of the reply that have come: read, or received by the kernel and not yet
        read (bytes that came before its turn, and so belong to it, count once read)."""
        with self._lock:
            sock, base = self._sock, self._kernel_base
        if sock is None or base is None:
            return self.got
        now = kernel_bytes_received(sock)
        return self.got if now is None else max(self.got, now - base)

    def detach(self, unread_count: bool) -> None:
        """The reply has ended: its count stays as it is now. `unread_count`: it ended early,
        and bytes the kernel received but nobody read count too."""
        if unread_count:
            self.got = self.received()
        with self._lock:
            self._sock = self._kernel_base = None

    def too_slow(self, now: float, grace: float = RATE_GRACE) -> bool:
        """Whether the reply, read for at least `grace` seconds, averages under the floor."""
        since = self.active_since
        if not self.min_rate or since is None or now - since < grace:
            return False
        return self.received() < self.min_rate * (now - since)

    def abort(self) -> None:
        with self._lock:
            self.aborted = True
            if self._sock is not None:
                with suppress(OSError):
                    self._sock.shutdown(socket.SHUT_RDWR)


def kernel_bytes_received(sock: socket.socket) -> int | None:
    """Bytes the kernel has received on the TCP connection `sock` so far, read or not; None
    where the system does not say (not Linux, too old a kernel, a closed socket)."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_BYTES)
    except (OSError, AttributeError):  # AttributeError: no TCP_INFO on this system
        return None
    if len(info) < _BYTES_RECEIVED_AT + 8:
        return None
    (count,) = struct.unpack_from("@Q", info, _BYTES_RECEIVED_AT)
    return int(count)
