"""Frames between the service and its clients, and from each sandbox's agent to the service.

A frame is a 4-byte big-endian length then that many bytes: UTF-8 JSON (one object) here; the
service's requests to an agent are NUL-separated strings instead (`agent.request`), so the C
agent needs no JSON parser. File descriptors ride on a frame's length bytes (SCM_RIGHTS).
"""

import json
import socket
import struct
from collections.abc import Sequence
from typing import Any

HEADER = struct.Struct(">I")


class WireError(Exception):
    """A peer that closed the connection or sent a frame that breaks the format."""


def send_frame(sock: socket.socket, data: bytes, fds: Sequence[int] = ()) -> None:
    header = HEADER.pack(len(data))
    if fds:
        socket.send_fds(sock, [header], list(fds))
        sock.sendall(data)
    else:
        sock.sendall(header + data)


def send_msg(sock: socket.socket, message: dict[str, Any]) -> None:
    send_frame(sock, json.dumps(message, separators=(",", ":")).encode())


def recv_msg(sock: socket.socket, max_bytes: int) -> dict[str, Any]:
    """One JSON-object frame, refused past `max_bytes`."""
    (length,) = HEADER.unpack(_recv_exact(sock, HEADER.size))
    if length > max_bytes:
        raise WireError(f"frame of {length} bytes is over the {max_bytes}-byte limit")
    try:
        message = json.loads(_recv_exact(sock, length))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise WireError(f"frame is not JSON ({str(exc)[:80]})") from None
    if not isinstance(message, dict):
        raise WireError(f"frame is a JSON {type(message).__name__}, not an object")
    return message


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise WireError(f"connection closed {size - left} bytes into a {size}-byte read")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
