"""The daemon's listener: answers gossip, have-map, manifest, signatures, piece, fetch and status
requests, and `GET /metrics`. Pieces go out with zero-copy `sendfile` from the local store when it
is a directory, from a transfer thread (see `transfer`), or from the event loop when an upload
rate limit shared by all connections paces them.

Nothing a connection sends escapes its handler: a refused frame is answered with why and the
connection closed; anything else unexpected is logged in one line, the connection closed, and the
daemon serves on (see `limits` for what a connection may cost).
"""

import asyncio
import contextlib
import os
import re
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from shipyard.distribute.catch_up import downstream_upload_slots
from shipyard.distribute.context import Context
from shipyard.distribute.limits import (
    KEEPALIVE,
    Admission,
    HeaderBudget,
    Refusals,
    reason,
    source_key,
)
from shipyard.distribute.local_peer import requester_uid
from shipyard.distribute.membership import encode_bits
from shipyard.distribute.messages import check_request
from shipyard.distribute.swarm_key import SwarmKeyRefused
from shipyard.distribute.transfer import send_piece
from shipyard.distribute.wire import HTTP_PREFIX, Header, PeerBusy, decode, encode, frame_length
from shipyard.errors import InvalidInput, NotFound, ShipyardError
from shipyard.store import LocalBackend
from shipyard.store.pieces import manifest_key, piece_key
from shipyard.trust.signatures import signatures_key

# Bytes a capped uplink (`upload_limit_bps`) sends of one reply before the next reply's turn:
# small, so replies share it as a link shares its flows. Whole pieces in turn made the last of
# a few queued replies wait seconds for its first byte, and cut off as slow (see `shortfall`).
_SLICE = 32 << 10
_METRICS_LINE = re.compile(rb"GET /metrics(\?[!-~]*)? HTTP/1\.[01]")

Handler = Callable[[Header, asyncio.StreamWriter], Awaitable[None]]
# (request, the requester's user id: None when it is not on this host)
LocalOp = Callable[[Header, int | None], Awaitable[Any]]


def use_congestion_control(listener: socket.socket, name: str) -> str | None:
    """Set TCP congestion control `name` on a listening socket: every connection it accepts
    afterwards inherits it. Returns why the kernel refused (an algorithm it lacks, or one this
    user may not choose: see `net.ipv4.tcp_allowed_congestion_control`), or None."""
    try:
        listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, name.encode())
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


class Throttle:
    """A token bucket: at most `rate` bytes per second, in bursts of a quarter second."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.tokens = rate / 4
        self.stamp = time.monotonic()
        self.lock = asyncio.Lock()

    async def take(self, nbytes: int) -> None:
        async with self.lock:
            now = time.monotonic()
            self.tokens = min(self.rate / 4, self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now
            self.tokens -= nbytes
            if self.tokens < 0:
                await asyncio.sleep(-self.tokens / self.rate)


class Server:
    def __init__(
        self,
        ctx: Context,
        ops: Mapping[str, Callable[[Header], Awaitable[Any]]],
        held: Callable[[str], int | None],
        local: Mapping[str, LocalOp] | None = None,
    ) -> None:
        """`ops` maps the daemon's own operations (fetch, status, gossip, have) to coroutines;
        `held(artifact)` is the have-map bits of an artifact this peer holds, or None. `local`:
        operations for clients on this host (materialize), told the client's user id."""
        self.ctx = ctx
        self.ops = ops
        self.local = local or {}
        self.held = held
        limit = ctx.config.upload_limit_bps
        self.throttle = Throttle(limit) if limit else None
        self.uploads = {True: 0, False: 0}  # open, by whether for a downstream peer
        self.key = ctx.key
        self.refusals = Refusals(ctx.config.me, ctx.metrics)
        self.admission = Admission(
            ctx.config.max_connections, ctx.config.max_connections_per_source, self._evicted
        )
        self.budget = HeaderBudget()

    async def close(self) -> None:
        """Cancel the handlers of open (kept-alive) connections."""
        for task in list(self.admission.open):
            task.cancel()
        await asyncio.gather(*self.admission.open, return_exceptions=True)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        source = _source(writer)
        refused = self.admission.admit(task, source_key(writer.get_extra_info("peername")))
        if refused is not None:
            why, message = refused
            self._refuse(writer, PeerBusy(message), source, why)
            writer.close()
            return
        try:
            while True:  # requests in turn until the peer hangs up or idles out
                self.admission.waiting(task, True)  # may be closed for a newcomer meanwhile
                async with asyncio.timeout(KEEPALIVE):
                    first = await reader.readexactly(1)
                # One deadline for the whole head from its first byte: a byte at a time
                # cannot keep a connection, nor its place in the table.
                deadline = asyncio.get_running_loop().time() + self.ctx.config.idle_timeout
                async with asyncio.timeout_at(deadline):
                    first += await reader.readexactly(3)
                    if first == HTTP_PREFIX:
                        head = await _http_head(reader)
                if first == HTTP_PREFIX:
                    self.admission.waiting(task, False)
                    await self._metrics(head, writer, source)
                    return
                header = await self._read_request(reader, first, deadline)
                self.admission.waiting(task, False)
                await self._dispatch(header, writer, source)
                async with asyncio.timeout(self.ctx.config.idle_timeout):
                    await writer.drain()
        except (OSError, TimeoutError, asyncio.IncompleteReadError):
            pass  # the requester sees a closed connection and tries elsewhere
        except asyncio.CancelledError:
            # The daemon is stopping, or the connection made room for another. Ending the
            # handler normally, rather than as a cancelled task, keeps asyncio's stream
            # callback (Python 3.11) from logging a traceback.
            pass
        except ShipyardError as exc:  # a frame refused: the connection may be out of step
            self._refuse(writer, exc, source, reason(exc))
        except Exception as exc:  # a bug: named in one line, and the daemon serves on
            self.refusals.note("error", source, f"{type(exc).__name__}: {exc}")
        finally:
            self.admission.leave(task)
            writer.close()

    def _evicted(self, source: str) -> None:
        self.refusals.note(
            "evicted", source, "closed a connection still waiting for its request, to make room"
        )

    async def _read_request(
        self, reader: asyncio.StreamReader, first: bytes, deadline: float
    ) -> Header:
        """The next request's header, read whole by `deadline` (the loop's clock) and within
        the budget for headers in flight, and (in a swarm with a key) only once it is signed."""
        length = frame_length(first)
        with self.budget.reserve(length):
            async with asyncio.timeout_at(deadline):
                data = await reader.readexactly(length)
        return decode(data, self.key)

    def _refuse(
        self, writer: asyncio.StreamWriter, exc: ShipyardError, source: str, why: str
    ) -> None:
        """Count and log a refusal, and tell the requester why. A requester without the swarm's
        key could not read a signed answer, so that one goes unsigned."""
        self.refusals.note(why, source, str(exc))
        key = None if isinstance(exc, SwarmKeyRefused) else self.key
        with contextlib.suppress(OSError):
            writer.write(encode({"error": str(exc), "kind": type(exc).__name__}, key))

    async def _dispatch(self, header: Header, writer: asyncio.StreamWriter, source: str) -> None:
        try:
            op = check_request(header)
        except InvalidInput as exc:
            self.ctx.metrics.inc("shipyard_peer_requests_served_total", op="other")
            self._refuse(writer, exc, source, "malformed")
            return
        self.ctx.metrics.inc("shipyard_peer_requests_served_total", op=op)
        key = self.key
        try:
            if op == "piece":
                # A few upload slots, like BitTorrent's unchoke slots: a full peer says so at
                # once, so requesters spread over other holders instead of queueing on one uplink.
                # Downstream peers in the mesh have slots of their own, one per lane they may
                # open, which no other request can take.
                cfg = self.ctx.config
                relay = header.get("relay") is True
                slots = downstream_upload_slots(cfg) if relay else cfg.upload_slots
                if self.uploads[relay] >= slots:
                    raise PeerBusy(f"all {slots} upload slots are in use")
                self.uploads[relay] += 1
                try:
                    await self._piece(header, writer)
                finally:
                    self.uploads[relay] -= 1
            elif op in ("manifest", "signatures"):
                key_of = manifest_key if op == "manifest" else signatures_key
                data = await asyncio.to_thread(self.ctx.store.backend.get, key_of(header["id"]))
                writer.write(encode({"size": len(data)}, key) + data)
            else:
                if op in self.local:
                    where = (writer.get_extra_info("peername"), writer.get_extra_info("sockname"))
                    reply = await self.local[op](header, requester_uid(*where))
                else:
                    reply = await self.ops[op](header)
                body = reply.pop("body", b"")
                writer.write(encode(reply | ({"size": len(body)} if body else {}), key) + body)
        except ShipyardError as exc:
            writer.write(encode({"error": str(exc), "kind": type(exc).__name__}, key))

    async def _piece(self, request: Header, writer: asyncio.StreamWriter) -> None:
        """Send the piece's bytes from the request's `offset` (0 when absent): the reply's
        `size` counts only those, and `offset` says where they start."""
        piece_hash: str = request["hash"]
        offset: int = request.get("offset", 0)
        artifact, requester = request.get("artifact"), request.get("from")
        reply: Header = {}
        if isinstance(artifact, str):
            # Swap have-maps with the requester: see `Holding._download`.
            if isinstance(requester, str):
                self.ctx.membership.note_have(requester, artifact, request.get("have"))
            held = self.held(artifact)
            if held is not None:
                reply["have"] = encode_bits(held)
        if offset:
            reply["offset"] = offset
        backend = self.ctx.store.backend
        if not isinstance(backend, LocalBackend):
            data = await asyncio.to_thread(self.ctx.store.get_piece, piece_hash)
            _check_offset(offset, len(data), piece_hash)
            writer.write(encode(reply | {"size": len(data) - offset}, self.key))
            await self._send_bytes(memoryview(data)[offset:], writer)
            self.ctx.metrics.inc("shipyard_peer_bytes_sent_total", len(data) - offset)
            return
        try:
            handle = open(backend.path(piece_key(piece_hash)), "rb")  # noqa: SIM115
        except (FileNotFoundError, ValueError):
            raise NotFound(f"piece {piece_hash[:16]} is not held here") from None
        with handle:
            end = os.fstat(handle.fileno()).st_size
            _check_offset(offset, end, piece_hash)
            header = encode(reply | {"size": end - offset}, self.key)
            if self.throttle is None and writer.transport.get_write_buffer_size() == 0:
                await self._send_on_thread(writer, header, handle.fileno(), (offset, end))
            else:  # paced, or earlier replies still queued in the transport: stay in the loop
                writer.write(header)
                loop = asyncio.get_running_loop()
                step = _SLICE if self.throttle else max(end - offset, 1)
                for start in range(offset, end, step):
                    count = min(step, end - start)
                    if self.throttle:
                        await self.throttle.take(count)
                    await loop.sendfile(writer.transport, handle, start, count)
        self.ctx.metrics.inc("shipyard_peer_bytes_sent_total", end - offset)

    async def _send_on_thread(
        self, writer: asyncio.StreamWriter, header: bytes, file_fd: int, span: tuple[int, int]
    ) -> None:
        """`send_piece` on a transfer thread, writing to the connection's socket directly."""
        sock = writer.get_extra_info("socket")
        loop = asyncio.get_running_loop()
        timeout = self.ctx.config.idle_timeout
        sending = loop.run_in_executor(
            self.ctx.transfers, send_piece, sock.fileno(), header, file_fd, span, timeout
        )
        try:
            await asyncio.shield(sending)
        except asyncio.CancelledError:
            # The thread still uses both descriptors: end its send, and let it return before
            # the file and the connection are closed under it.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            await asyncio.wait([sending])
            raise

    async def _send_bytes(self, data: memoryview, writer: asyncio.StreamWriter) -> None:
        for offset in range(0, len(data), _SLICE):
            chunk = data[offset : offset + _SLICE]
            if self.throttle:
                await self.throttle.take(len(chunk))
            writer.write(chunk)
            await writer.drain()

    async def _metrics(self, head: bytes | None, writer: asyncio.StreamWriter, source: str) -> None:
        """Answer `GET /metrics`; refuse a head over 64 KiB (None) or anything else with its
        HTTP status."""
        if head is None:
            self.refusals.note("http", source, "HTTP request head over 64 KiB")
            writer.write(_http("431 Request Header Fields Too Large", b"request head too large\n"))
            return
        if not _METRICS_LINE.fullmatch(head.split(b"\r\n", 1)[0]):
            self.refusals.note("http", source, f"HTTP request {head[:60]!r} is not GET /metrics")
            writer.write(_http("404 Not Found", b"only GET /metrics is served here\n"))
            return
        self.ctx.metrics.set("shipyard_peer_members_alive", len(self.ctx.membership.alive()))
        writer.write(_http("200 OK", self.ctx.metrics.render(), "text/plain; version=0.0.4"))
        async with asyncio.timeout(self.ctx.config.idle_timeout):
            await writer.drain()


async def _http_head(reader: asyncio.StreamReader) -> bytes | None:
    """An HTTP request's head after its `GET `, or None when it runs past the stream's limit
    (64 KiB) without ending."""
    try:
        return HTTP_PREFIX + await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        return None


def _http(status: str, body: bytes, content_type: str = "text/plain") -> bytes:
    head = (
        f"HTTP/1.0 {status}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


def _source(writer: asyncio.StreamWriter) -> str:
    """Who is at the other end, for the log."""
    peer = writer.get_extra_info("peername")
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "a peer"


def _check_offset(offset: int, size: int, piece_hash: str) -> None:
    if offset and offset >= size:
        raise InvalidInput(f"piece {piece_hash[:16]} has {size} bytes: offset {offset} is past")
