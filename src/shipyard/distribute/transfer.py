"""Piece transfers on worker threads over blocking sockets: the daemon's data plane.

Through asyncio a piece crossing a rate-limited link woke the event loop every few kilobytes, on
both ends, and each wakeup cost tens of microseconds of Python: at 100 Mbit/s that was most of a
daemon's CPU, and on a busy host the swarm slowed with it. Here a receiving thread asks the
kernel for a whole `CHUNK` at once (`MSG_WAITALL`) and hands it to the piece's sink, a partial
file on disk (see `shipyard.store.partial`), and a sending thread hands the kernel the whole
file (`sendfile`), so Python runs a handful of times per piece. A request may ask for a piece
from an offset: the bytes a cut-short transfer left in its partial file are not sent again.

Requests to one peer share one connection, its `Lane`, and are pipelined: the next goes out while
the previous body is still arriving, so the peer's link never idles between pieces.

`SO_RCVTIMEO` makes each receive return after `idle_timeout` with whatever has arrived; nothing
at all means the sender stalled, and a reply slower on average than the minimum rate, once it
has had `RATE_GRACE` seconds, is cut off (a sender trickling a byte a second never stalls). A
failure that is the sender's own doing is a `PeerFault` naming why (see `blame`). A call is
aborted from the event loop (a hedged twin won, the daemon is stopping) by shutting its socket
down, which ends a blocked receive at once: `Aborted`, nobody's fault.
"""

import asyncio
import os
import select
import socket
import struct
import threading
from dataclasses import dataclass

from shipyard.distribute.config import Address
from shipyard.distribute.membership import encode_bits
from shipyard.distribute.piece_call import Aborted, PieceCall, TooSlow
from shipyard.distribute.swarm_key import SwarmKey
from shipyard.distribute.wire import (
    Header,
    PeerGone,
    PeerUnavailable,
    body_size,
    check_reply,
    decode,
    encode,
    frame_length,
)
from shipyard.errors import InvalidInput
from shipyard.store.partial import CHUNK, PieceSink, SinkError

ORIGIN = "origin"  # a transfer's source when it is the origin, not a peer (and so in traces)


def piece_request(
    piece_hash: str, artifact: str, me: str, held: int, relay: bool, offset: int = 0
) -> Header:
    """A `piece` request, for its bytes from `offset` on. It carries the requester's have-map,
    and the reply the sender's, so both learn of each other's newest pieces at once instead of a
    few gossip rounds later. `relay`: the sender is the requester's upstream peer in the mesh,
    for which it keeps upload slots, so the mesh never stalls behind other requests."""
    request: Header = {
        "op": "piece",
        "hash": piece_hash,
        "artifact": artifact,
        "from": me,
        "have": encode_bits(held),
        "relay": relay,
    }
    return request | {"offset": offset} if offset else request


def _timeval(seconds: float) -> bytes:
    return struct.pack("@ll", int(seconds), int(seconds % 1 * 1e6))


class LaneReset(PeerUnavailable):
    """An earlier request on the same connection failed or was aborted, so this one, sent
    behind it, was lost with the connection. Not the peer's fault: ask again."""


class PeerFault(PeerUnavailable):
    """The peer failed a piece it was asked for, by its own doing: `reason` is one of
    `blame.REASONS` (refused, truncated, stalled, slow; corrupt for a malformed reply)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class Transfer:
    """One piece request in flight: where it went, when, and the task that runs it."""

    source: str  # a peer's HOST:PORT, or ORIGIN
    started: float
    call: PieceCall | None  # None for the origin
    task: "asyncio.Task[None]"
    lane: int = 0  # which of the connections to `source` carries it

    def age(self, now: float) -> float:
        """How long its bytes have been coming (a request queued on a lane is not late yet)."""
        active = self.started if self.call is None else self.call.active_since
        return 0.0 if active is None else now - active


class Lane:
    """One kept-alive connection to one peer that carries its piece requests back to back.

    A request goes out as soon as it is made, even while earlier replies are still arriving, so
    the peer reads it the moment it has sent the previous piece and starts on it at once: the
    link never idles for a round trip (and the scheduling between pieces), and one TCP flow per
    pair of peers keeps its window open. Replies come back in request order; each caller waits
    its turn, then reads its own reply.

    Any failure, or an abort, closes the connection: the requests queued behind fail with
    `LaneReset` and the next request opens a fresh connection. A connection the peer closed
    while idle (its keep-alive ran out) is retried once on a fresh one.
    """

    def __init__(
        self,
        address: Address,
        connect_timeout: float,
        idle_timeout: float,
        key: SwarmKey | None = None,
    ) -> None:
        self.where = f"{address[0]}:{address[1]}"
        self._address = address
        self._timeouts = connect_timeout, idle_timeout
        self._key = key
        self._turn = threading.Condition()
        self._sock: socket.socket | None = None
        self._sent = 0  # requests sent on the current connection
        self._read = 0  # replies read off it

    def fetch(self, call: PieceCall, request: Header, sink: PieceSink) -> Header:
        """The reply header to a `piece` request, its bytes (unverified) written to `sink`;
        blocking, for a worker thread. Raises `PeerUnavailable`: `PeerGone` when the connection
        was refused, `PeerBusy` when the peer's upload slots are full, `PeerFault` when the
        peer failed the piece, `Aborted` or `LaneReset` when nobody is to blame."""
        for attempt in range(2):
            sock, ticket, may_be_stale = self._send(request)
            try:
                reply = self._read_reply(call, sock, ticket, sink)
            except TooSlow as exc:
                raise self._fault(call, "slow", f"below the minimum rate: {exc}") from None
            except (ConnectionError, EOFError) as exc:
                if attempt == 0 and may_be_stale and not call.aborted and not sink.received:
                    continue  # the peer had closed the idle connection: once more, fresh
                raise self._fault(call, "truncated", exc) from None
            except TimeoutError as exc:
                raise self._fault(call, "stalled", exc) from None
            except OSError as exc:
                raise self._fault(call, "truncated", exc) from None
            except (ValueError, InvalidInput) as exc:
                raise self._fault(call, "corrupt", exc) from None
            if reply.get("error") and reply.get("kind") != "PeerBusy":
                raise PeerFault("refused", f"peer {self.where}: {str(reply['error'])[:500]}")
            check_reply(reply, self.where)
            return reply
        raise AssertionError("unreachable: the second attempt returns or raises")

    def _fault(self, call: PieceCall, reason: str, exc: BaseException | str) -> PeerUnavailable:
        """The error a failed read raises: `Aborted` when this host called it off."""
        what = exc if isinstance(exc, str) else f"{type(exc).__name__} {exc}"
        message = f"peer {self.where}: {what}"
        return Aborted(message) if call.aborted else PeerFault(reason, message)

    def close(self) -> None:
        with self._turn:
            if self._sock is not None:
                self._reset(self._sock)

    def _send(self, request: Header) -> tuple[socket.socket, int, bool]:
        """Send on the current connection, opening one if there is none; return it, the
        request's place in its order, and whether it was an idle kept-alive connection (which
        the peer may have closed meanwhile)."""
        with self._turn:
            may_be_stale = self._sock is not None and self._sent == self._read
            while True:
                if self._sock is None:
                    self._sock = self._connect()
                    self._sent = self._read = 0
                sock, ticket = self._sock, self._sent
                try:
                    sock.sendall(encode(request, self._key))  # small: it never waits long
                except OSError as exc:
                    self._reset(sock)
                    if may_be_stale:
                        may_be_stale = False
                        continue  # the peer closed it while idle: once more, fresh
                    where = f"peer {self.where}: {type(exc).__name__} {exc}"
                    raise PeerUnavailable(where) from None
                self._sent += 1
                return sock, ticket, may_be_stale

    def _connect(self) -> socket.socket:
        try:
            return _connect(self._address, *self._timeouts)
        except ConnectionRefusedError:
            raise PeerGone(f"peer {self.where}: connection refused") from None
        except OSError as exc:
            raise PeerUnavailable(f"peer {self.where}: {type(exc).__name__} {exc}") from None

    def _read_reply(
        self, call: PieceCall, sock: socket.socket, ticket: int, sink: PieceSink
    ) -> Header:
        with self._turn:
            while self._sock is sock and self._read < ticket:
                self._turn.wait()
            if self._sock is not sock:
                raise LaneReset(f"peer {self.where}: an earlier request on the connection failed")
        try:
            call.attach(sock)
            reply, refused = _receive_reply(sock, sink, self.where, self._key, call)
        except BaseException:
            call.detach(unread_count=True)  # before the socket goes: what came, read or not
            with self._turn:
                self._reset(sock)
            raise
        call.detach(unread_count=False)  # read whole: what follows is the next reply's
        with self._turn:
            if self._sock is sock:
                self._read += 1
                self._turn.notify_all()
        if refused is not None:
            raise refused
        return reply

    def _reset(self, sock: socket.socket) -> None:
        """Drop `sock` (the caller holds `_turn`): requests waiting on it fail."""
        if self._sock is sock:
            self._sock = None
            self._turn.notify_all()
        sock.close()


class Lanes:
    """The lanes to each peer, made on first use: one, or a second for a peer that is catching
    up (see `catch_up`)."""

    def __init__(
        self, connect_timeout: float, idle_timeout: float, key: SwarmKey | None = None
    ) -> None:
        self._timeouts = connect_timeout, idle_timeout
        self._key = key
        self._lanes: dict[tuple[Address, int], Lane] = {}
        self._lock = threading.Lock()

    def __call__(self, address: Address, index: int = 0) -> Lane:
        with self._lock:
            lane = self._lanes.get((address, index))
            if lane is None:
                lane = self._lanes[address, index] = Lane(address, *self._timeouts, self._key)
            return lane

    def close(self) -> None:
        with self._lock:
            for lane in self._lanes.values():
                lane.close()


def _connect(address: Address, connect_timeout: float, idle_timeout: float) -> socket.socket:
    sock = socket.create_connection(address, timeout=connect_timeout)
    sock.settimeout(None)  # blocking: the kernel-side timeouts below bound each call instead
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(idle_timeout))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _timeval(idle_timeout))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _receive_reply(
    sock: socket.socket, sink: PieceSink, where: str, key: SwarmKey | None, call: PieceCall
) -> tuple[Header, SinkError | None]:
    """Read a `piece` reply: its header, then its bytes into `sink`, and whether the sink
    refused them (see `_receive_into`). An error reply has no bytes."""
    length = frame_length(bytes(_receive(sock, 4, call)))
    reply = decode(bytes(_receive(sock, length, call)), key)
    if reply.get("error"):
        return reply, None
    size = body_size(reply)
    if size is None:
        raise PeerUnavailable(f"peer {where} sent no bytes for a piece")
    if reply.get("offset", 0) != sink.kept:
        sink.restart()  # a sender that does not resume pieces sends this one whole
    return reply, _receive_into(sock, size, sink, call)


def _receive(sock: socket.socket, size: int, call: PieceCall) -> bytearray:
    """Exactly `size` bytes (a header: small)."""
    buffer = bytearray(size)
    view = memoryview(buffer)
    got = 0
    while got < size:
        got += _receive_some(sock, view[got:], got, size, call)
    return buffer


def _receive_into(
    sock: socket.socket, size: int, sink: PieceSink, call: PieceCall
) -> SinkError | None:
    """Exactly `size` bytes into `sink`, a `CHUNK` at a time, each on disk before the next. A
    sink that refuses them (this host's disk is full) does not end the transfer: the rest is
    read and dropped, so the connection stays in step for the requests behind this one, and
    the refusal is returned."""
    buffer = bytearray(min(size, CHUNK))
    view = memoryview(buffer)
    got = 0
    refused = None
    while got < size:
        count = _receive_some(sock, view[: min(CHUNK, size - got)], got, size, call)
        if refused is None:
            try:
                sink.write(view[:count])
            except SinkError as exc:
                refused = exc
        got += count
    return refused


def _receive_some(
    sock: socket.socket, into: memoryview, got: int, size: int, call: PieceCall
) -> int:
    """Fill `into`: the kernel waits for all of it, or returns what came within the idle
    timeout; EOF, an empty wait or a rate under the call's floor ends the transfer (`got` of
    `size` bytes so far)."""
    try:
        count = sock.recv_into(into, len(into), socket.MSG_WAITALL)
    except BlockingIOError:
        raise TimeoutError(f"no bytes for a whole idle timeout after {got} of {size}") from None
    if count == 0:
        raise EOFError(f"connection closed after {got} of {size} bytes")
    call.note(count)
    return count


def send_piece(
    sock_fd: int, header: bytes, file_fd: int, span: tuple[int, int], idle_timeout: float
) -> None:
    """Write `header` then the bytes `span` (start, end) of `file_fd` to the non-blocking socket
    `sock_fd` (the event loop's), waiting for room in the kernel's buffer at most `idle_timeout`
    at a time."""
    poller = select.poll()
    poller.register(sock_fd, select.POLLOUT)
    sent = 0
    while sent < len(header):
        try:
            sent += os.write(sock_fd, header[sent:])
        except BlockingIOError:
            _wait_writable(poller, idle_timeout)
    offset, end = span
    while offset < end:
        try:
            count = os.sendfile(sock_fd, file_fd, offset, end - offset)
        except BlockingIOError:
            _wait_writable(poller, idle_timeout)
            continue
        if count == 0:  # an OSError, not a reply: part of the body is out, so the connection goes
            raise OSError(f"piece file ended after {offset} of {end} bytes")
        offset += count


def _wait_writable(poller: select.poll, idle_timeout: float) -> None:
    if not poller.poll(idle_timeout * 1000):
        raise TimeoutError(f"receiver took nothing for {idle_timeout} s")
