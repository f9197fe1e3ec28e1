"""The peer protocol's framing: a 4-byte length, a JSON header, then `size` raw bytes if any.

One request per connection keeps cancellation trivial (close the socket) and lets a slow or dead
peer cost exactly one connection. The same listener answers plain `GET /metrics` for Prometheus:
the first four bytes of an HTTP request can never be a sane header length.
"""

import asyncio
import json
import struct
from typing import Any

from shipyard.distribute.config import Address
from shipyard.errors import InvalidInput, StorageError

Header = dict[str, Any]

MAX_HEADER = 8 << 20
HTTP_PREFIX = b"GET "
_CHUNK = 256 << 10


class PeerUnavailable(StorageError):
    """A peer refused, timed out, closed early or answered with an error."""


class PeerGone(PeerUnavailable):
    """The peer's host refused the connection: nothing listens there, so its daemon is down.
    Unlike a timeout, which a full queue on a busy link also causes, this is certain."""


class PeerBusy(PeerUnavailable):
    """A peer has all its upload slots in use: ask another holder, or this one a bit later."""


def encode(header: Header) -> bytes:
    data = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack(">I", len(data)) + data


async def read_header(reader: asyncio.StreamReader, timeout: float, first: bytes = b"") -> Header:
    """Read one framed header; `first` holds prefix bytes the caller already consumed."""
    # asyncio.timeout, not wait_for: wait_for wraps each read in a task of its own, a cost
    # paid on every message a daemon sends or answers.
    async with asyncio.timeout(timeout):
        prefix = first + await reader.readexactly(4 - len(first))
        (length,) = struct.unpack(">I", prefix)
        if length > MAX_HEADER:
            raise InvalidInput(f"peer header of {length} bytes exceeds {MAX_HEADER}")
        data = await reader.readexactly(length)
    header = json.loads(data)
    if not isinstance(header, dict):
        raise InvalidInput("peer header is not a JSON object")
    return header


async def read_body(reader: asyncio.StreamReader, size: int, idle_timeout: float) -> bytes:
    """Read exactly `size` bytes, failing when the sender stalls for `idle_timeout`. One timer is
    pushed back per chunk (not a task per read), and chunks are joined once at the end."""
    chunks: list[bytes] = []
    got = 0
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(idle_timeout) as watchdog:
        while got < size:
            chunk = await reader.read(min(_CHUNK, size - got))
            if not chunk:
                raise asyncio.IncompleteReadError(b"".join(chunks), size)
            chunks.append(chunk)
            got += len(chunk)
            watchdog.reschedule(loop.time() + idle_timeout)
    return b"".join(chunks)


Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class Pool:
    """Idle connections per peer. Reusing one spares a piece the TCP handshake and slow start;
    a connection is used by one request at a time and closed on any failure or cancellation."""

    def __init__(self, per_peer: int) -> None:
        self.per_peer = per_peer
        self.idle: dict[Address, list[Stream]] = {}

    def take(self, address: Address) -> Stream | None:
        streams = self.idle.get(address, [])
        while streams:
            reader, writer = streams.pop()
            if not writer.is_closing() and not reader.at_eof():
                return reader, writer
            writer.close()
        return None

    def close(self) -> None:
        for streams in self.idle.values():
            for _, writer in streams:
                writer.close()
        self.idle.clear()

    def give(self, address: Address, stream: Stream) -> None:
        streams = self.idle.setdefault(address, [])
        if len(streams) < self.per_peer:
            streams.append(stream)
        else:
            stream[1].close()


async def request(
    address: Address,
    header: Header,
    connect_timeout: float,
    idle_timeout: float,
    pool: Pool | None = None,
) -> tuple[Header, bytes | None]:
    """Send one request and return the reply header and body (None when it carries none)."""
    where = f"{address[0]}:{address[1]}"
    stream = pool.take(address) if pool else None
    while True:
        fresh = stream is None
        try:
            if stream is None:
                stream = await asyncio.wait_for(
                    asyncio.open_connection(*address, limit=_CHUNK), connect_timeout
                )
            reply, body = await _exchange(stream, header, idle_timeout)
            break
        except ConnectionRefusedError:
            raise PeerGone(f"peer {where}: connection refused") from None
        except (OSError, asyncio.IncompleteReadError) as exc:
            if stream is not None:
                stream[1].close()
            stream = None
            if fresh:
                raise PeerUnavailable(f"peer {where}: {type(exc).__name__} {exc}") from None
            # else: a pooled connection the peer had closed meanwhile; once more, fresh
        except (TimeoutError, ValueError, InvalidInput) as exc:
            if stream is not None:
                stream[1].close()
            raise PeerUnavailable(f"peer {where}: {type(exc).__name__} {exc}") from None
        except BaseException:
            if stream is not None:
                stream[1].close()
            raise
    if pool:
        pool.give(address, stream)
    else:
        stream[1].close()
    check_reply(reply, where)
    return reply, body


def check_reply(reply: Header, where: str) -> None:
    """Raise `PeerBusy` or `PeerUnavailable` when a reply from `where` carries an error."""
    if reply.get("error"):
        kind = PeerBusy if reply.get("kind") == "PeerBusy" else PeerUnavailable
        raise kind(f"peer {where}: {reply['error']}")


async def _exchange(
    stream: Stream, header: Header, idle_timeout: float
) -> tuple[Header, bytes | None]:
    reader, writer = stream
    writer.write(encode(header))
    async with asyncio.timeout(idle_timeout):
        await writer.drain()
    reply = await read_header(reader, idle_timeout)
    body = None
    if "size" in reply:
        body = await read_body(reader, int(reply["size"]), idle_timeout)
    return reply, body
