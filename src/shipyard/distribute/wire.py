"""The peer protocol's framing: a 4-byte length, a JSON header, then `size` raw bytes if any.
In a swarm with a key the header's bytes are followed, within the length, by their MAC (see
`swarm_key`).

One request per connection keeps cancellation trivial (close the socket) and lets a slow or dead
peer cost exactly one connection. The same listener answers plain `GET /metrics` for Prometheus:
the first four bytes of an HTTP request can never be a sane header length.

A header is parsed as strict JSON: no NaN or Infinity, no number too large for a float, no
nesting deeper than the parser's stack. Whatever is wrong with one is `InvalidInput`.
"""

import asyncio
import json
import struct
from typing import Any

from shipyard.distribute.config import Address
from shipyard.distribute.swarm_key import MAC_SIZE, SwarmKey, SwarmKeyRefused
from shipyard.errors import InvalidInput, StorageError
from shipyard.store.manifest import MAX_PIECE_SIZE

Header = dict[str, Any]

# A gossip view of a thousand members with the piece bits of 25 of them for a 100,000-piece
# artifact, or a fetch naming 10,000 pieces, is a few hundred KiB: 1 MiB leaves room for both.
MAX_HEADER = 1 << 20
MAX_BODY = MAX_PIECE_SIZE  # the largest piece a manifest may name, and more than any manifest
HTTP_PREFIX = b"GET "
_CHUNK = 256 << 10


class HeaderTooLarge(InvalidInput):
    """A frame declared a header longer than `MAX_HEADER`."""


class PeerUnavailable(StorageError):
    """A peer refused, timed out, closed early or answered with an error."""


class PeerGone(PeerUnavailable):
    """The peer's host refused the connection: nothing listens there, so its daemon is down.
    Unlike a timeout, which a full queue on a busy link also causes, this is certain."""


class PeerBusy(PeerUnavailable):
    """A peer has all its upload slots in use: ask another holder, or this one a bit later."""


def encode(header: Header, key: SwarmKey | None = None) -> bytes:
    """One framed header; with `key`, stamped and followed by its MAC."""
    if key is None:
        data = json.dumps(header, separators=(",", ":")).encode()
    else:
        data = json.dumps(header | key.stamp(), separators=(",", ":")).encode()
        data += key.sign(data)
    return struct.pack(">I", len(data)) + data


def frame_length(prefix: bytes) -> int:
    """The header length a frame's first four bytes declare; refused above `MAX_HEADER`."""
    (length,) = struct.unpack(">I", prefix)
    if length > MAX_HEADER:
        raise HeaderTooLarge(f"peer header of {length} bytes exceeds {MAX_HEADER}")
    return int(length)


def decode(data: bytes, key: SwarmKey | None = None) -> Header:
    """A header from a frame's bytes: with `key`, only once its MAC and freshness check out."""
    if key is not None:
        if len(data) < MAC_SIZE:
            raise SwarmKeyRefused("no MAC: this swarm needs its swarm key (see --swarm-key-file)")
        data, mac = data[:-MAC_SIZE], data[-MAC_SIZE:]
        key.verify(data, mac)
    try:
        header = json.loads(data, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise InvalidInput("peer header is JSON nested too deep") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError among them
        raise InvalidInput(f"peer header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise InvalidInput("peer header is not a JSON object")
    if key is not None:
        key.check_fresh(header)
    return header


def _no_constant(name: str) -> Any:
    raise InvalidInput(f"peer header holds {name}, which is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise InvalidInput(f"peer header holds {text[:40]}, beyond the range of a float")
    return value


def body_size(reply: Header) -> int | None:
    """The byte count a reply says follows it (None: no body), checked to be one."""
    size = reply.get("size")
    if size is None:
        return None
    if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= MAX_BODY:
        raise InvalidInput(f"reply size {size!r} is not a byte count up to {MAX_BODY}")
    return size


async def read_header(
    reader: asyncio.StreamReader, timeout: float, first: bytes = b"", key: SwarmKey | None = None
) -> Header:
    """Read one framed header; `first` holds prefix bytes the caller already consumed."""
    # asyncio.timeout, not wait_for: wait_for wraps each read in a task of its own, a cost
    # paid on every message a daemon sends or answers.
    async with asyncio.timeout(timeout):
        length = frame_length(first + await reader.readexactly(4 - len(first)))
        data = await reader.readexactly(length)
    return decode(data, key)


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
    key: SwarmKey | None = None,
) -> tuple[Header, bytes | None]:
    """Send one request and return the reply header and body (None when it carries none);
    with `key`, both signed (see `swarm_key`)."""
    where = f"{address[0]}:{address[1]}"
    stream = pool.take(address) if pool else None
    while True:
        fresh = stream is None
        try:
            if stream is None:
                stream = await asyncio.wait_for(
                    asyncio.open_connection(*address, limit=_CHUNK), connect_timeout
                )
            reply, body = await _exchange(stream, header, idle_timeout, key)
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
        raise kind(f"peer {where}: {str(reply['error'])[:500]}")


async def _exchange(
    stream: Stream, header: Header, idle_timeout: float, key: SwarmKey | None
) -> tuple[Header, bytes | None]:
    reader, writer = stream
    writer.write(encode(header, key))
    async with asyncio.timeout(idle_timeout):
        await writer.drain()
    reply = await read_header(reader, idle_timeout, key=key)
    size = body_size(reply)
    body = None if size is None else await read_body(reader, size, idle_timeout)
    return reply, body
