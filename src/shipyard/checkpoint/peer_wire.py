"""Peer memory's framing: the swarm's signed headers (see `distribute.wire`), then a payload.

A message is a 4-byte big-endian length, a JSON header stamped and followed by its HMAC-SHA256
under the swarm key, then `size` payload bytes. A receiver checks the MAC and freshness before it
looks at a field (`distribute.swarm_key`), and takes a payload only once the caller has accepted
its declared size: nothing is allocated on a stranger's word. Every read runs under a deadline.
"""

import socket
import time
from collections.abc import Sequence
from typing import Any

from shipyard.distribute.swarm_key import SwarmKey
from shipyard.distribute.wire import decode, encode, frame_length
from shipyard.errors import InvalidInput

MAX_HEADER_BYTES = 1 << 16  # requests and replies are a few small fields
Blob = Sequence[memoryview]


def send(sock: socket.socket, header: dict[str, Any], key: SwarmKey, payload: Blob = ()) -> None:
    sock.sendall(encode({**header, "size": sum(view.nbytes for view in payload)}, key))
    for view in payload:
        sock.sendall(view)


def recv_exact(sock: socket.socket, size: int, deadline: float | None, idle_s: float) -> bytearray:
    """`size` bytes; TimeoutError past `deadline` (monotonic), or when the sender is silent for
    `idle_s`. The caller has checked `size` against what it expects."""
    buffer = bytearray(size)
    view, got = memoryview(buffer), 0
    while got < size:
        left = idle_s if deadline is None else min(idle_s, deadline - time.monotonic())
        if left <= 0:
            raise TimeoutError("peer too slow: deadline passed mid-message")
        sock.settimeout(left)
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("peer closed the connection mid-message")
        got += n
    return buffer


def recv_header(sock: socket.socket, key: SwarmKey, deadline: float) -> dict[str, Any]:
    """One signed header, whole before `deadline`; InvalidInput (a `SwarmKeyRefused` among them)
    when it is too long, unsigned, stale, replayed or not a JSON object with a byte `size`."""
    length = frame_length(bytes(recv_exact(sock, 4, deadline, deadline - time.monotonic())))
    if length > MAX_HEADER_BYTES:
        raise InvalidInput(f"a peer header of {length} bytes (at most {MAX_HEADER_BYTES})")
    header = decode(bytes(recv_exact(sock, length, deadline, deadline - time.monotonic())), key)
    size = header.get("size")
    if type(size) is not int or size < 0:
        raise InvalidInput("a peer header without a valid size")
    return header
