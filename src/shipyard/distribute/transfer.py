"""Piece transfers on worker threads over blocking sockets: the daemon's data plane.

Through asyncio a piece crossing a rate-limited link woke the event loop every few kilobytes, on
both ends, and each wakeup cost tens of microseconds of Python: at 100 Mbit/s that was most of a
daemon's CPU, and on a busy host the swarm slowed with it. Here a receiving thread asks the
kernel for the whole body at once (`MSG_WAITALL`) and a sending thread hands it the whole file
(`sendfile`), so Python runs a handful of times per piece.

`SO_RCVTIMEO` makes each receive return after `idle_timeout` with whatever has arrived; nothing
at all means the sender stalled. A call is aborted from the event loop (a hedged twin won, the
daemon is stopping) by shutting its socket down, which ends a blocked receive at once.
"""

import json
import os
import select
import socket
import struct
import threading
from contextlib import suppress

from shipyard.distribute.config import Address
from shipyard.distribute.wire import MAX_HEADER, Header, PeerUnavailable, check_reply, encode


def _timeval(seconds: float) -> bytes:
    return struct.pack("@ll", int(seconds), int(seconds % 1 * 1e6))


class Connections:
    """Idle blocking connections per peer, shared by the worker threads."""

    def __init__(self, per_peer: int) -> None:
        self.per_peer = per_peer
        self._idle: dict[Address, list[socket.socket]] = {}
        self._lock = threading.Lock()

    def take(self, address: Address) -> socket.socket | None:
        with self._lock:
            idle = self._idle.get(address)
            return idle.pop() if idle else None

    def give(self, address: Address, sock: socket.socket) -> None:
        with self._lock:
            idle = self._idle.setdefault(address, [])
            if len(idle) < self.per_peer:
                idle.append(sock)
                return
        sock.close()

    def close(self) -> None:
        with self._lock:
            for idle in self._idle.values():
                for sock in idle:
                    sock.close()
            self._idle.clear()


class PieceCall:
    """One piece request; `abort()` may come from any thread, before or during the transfer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self.aborted = False

    def attach(self, sock: socket.socket) -> None:
        with self._lock:
            if self.aborted:
                raise PeerUnavailable("request aborted")
            self._sock = sock

    def abort(self) -> None:
        with self._lock:
            self.aborted = True
            if self._sock is not None:
                with suppress(OSError):
                    self._sock.shutdown(socket.SHUT_RDWR)


def fetch_piece(
    call: PieceCall,
    address: Address,
    request: Header,
    connect_timeout: float,
    idle_timeout: float,
    connections: Connections,
) -> tuple[Header, bytearray]:
    """The reply header and the bytes a peer sends for a `piece` request (unverified);
    blocking, for a worker thread.

    A pooled connection the peer has closed meanwhile is retried once on a fresh one; any other
    failure closes the connection and raises `PeerUnavailable` (or `PeerBusy`).
    """
    where = f"{address[0]}:{address[1]}"
    sock = connections.take(address)
    while True:
        fresh = sock is None
        try:
            if sock is None:
                sock = _connect(address, connect_timeout, idle_timeout)
            try:
                call.attach(sock)
            except PeerUnavailable:  # aborted before it began
                sock.close()
                raise
            reply, body = _exchange(sock, request)
            break
        except (ConnectionError, EOFError) as exc:
            if sock is not None:
                sock.close()
            sock = None
            if fresh or call.aborted:
                raise PeerUnavailable(f"peer {where}: {type(exc).__name__} {exc}") from None
        except (OSError, ValueError) as exc:
            if sock is not None:
                sock.close()
            raise PeerUnavailable(f"peer {where}: {type(exc).__name__} {exc}") from None
    connections.give(address, sock)
    check_reply(reply, where)
    if body is None:
        raise PeerUnavailable(f"peer {where} sent no bytes for piece {request.get('hash')}")
    return reply, body


def _connect(address: Address, connect_timeout: float, idle_timeout: float) -> socket.socket:
    sock = socket.create_connection(address, timeout=connect_timeout)
    sock.settimeout(None)  # blocking: the kernel-side timeouts below bound each call instead
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(idle_timeout))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _timeval(idle_timeout))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _exchange(sock: socket.socket, header: Header) -> tuple[Header, bytearray | None]:
    sock.sendall(encode(header))
    (length,) = struct.unpack(">I", _receive(sock, 4))
    if length > MAX_HEADER:
        raise ValueError(f"peer header of {length} bytes exceeds {MAX_HEADER}")
    reply = json.loads(_receive(sock, length))
    if not isinstance(reply, dict):
        raise ValueError("peer header is not a JSON object")
    size = reply.get("size")
    return reply, None if size is None else _receive(sock, int(size))


def _receive(sock: socket.socket, size: int) -> bytearray:
    """Exactly `size` bytes. Each receive waits in the kernel for all of them, or returns what
    came within the idle timeout; EOF or an empty wait ends the transfer."""
    buffer = bytearray(size)
    view = memoryview(buffer)
    got = 0
    while got < size:
        try:
            count = sock.recv_into(view[got:], size - got, socket.MSG_WAITALL)
        except BlockingIOError:
            raise TimeoutError(f"no bytes for a whole idle timeout after {got} of {size}") from None
        if count == 0:
            raise EOFError(f"connection closed after {got} of {size} bytes")
        got += count
    return buffer


def send_piece(sock_fd: int, header: bytes, file_fd: int, size: int, idle_timeout: float) -> None:
    """Write `header` then `size` bytes of `file_fd` to the non-blocking socket `sock_fd` (the
    event loop's), waiting for room in the kernel's buffer at most `idle_timeout` at a time."""
    poller = select.poll()
    poller.register(sock_fd, select.POLLOUT)
    sent = 0
    while sent < len(header):
        try:
            sent += os.write(sock_fd, header[sent:])
        except BlockingIOError:
            _wait_writable(poller, idle_timeout)
    offset = 0
    while offset < size:
        try:
            count = os.sendfile(sock_fd, file_fd, offset, size - offset)
        except BlockingIOError:
            _wait_writable(poller, idle_timeout)
            continue
        if count == 0:  # an OSError, not a reply: part of the body is out, so the connection goes
            raise OSError(f"piece file ended after {offset} of {size} bytes")
        offset += count


def _wait_writable(poller: select.poll, idle_timeout: float) -> None:
    if not poller.poll(idle_timeout * 1000):
        raise TimeoutError(f"receiver took nothing for {idle_timeout} s")
