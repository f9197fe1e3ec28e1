"""Bytes to a live daemon over a plain socket, as any program that can reach its port sends them."""

import json
import os
import socket
import struct
import time
from typing import Any

from shipyard.distribute.swarm_key import SwarmKey
from shipyard.distribute.wire import decode, encode


def frame(header: Any) -> bytes:
    """A frame around `header`: JSON of any value, or the bytes given."""
    data = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack(">I", len(data)) + data


def exchange(
    address: tuple[str, int], data: bytes, key: SwarmKey | None = None, timeout: float = 10.0
) -> dict[str, Any] | None:
    """Send `data`, end the sending side, and return the reply header, or None when the daemon
    closed the connection without one."""
    with socket.create_connection(address, timeout=timeout) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            return None  # refused before everything was sent
        reply = _read_all(sock)
    if len(reply) < 4 or len(reply) < 4 + struct.unpack(">I", reply[:4])[0]:
        return None  # closed, or still busy when the wait ran out
    (length,) = struct.unpack(">I", reply[:4])
    return decode(reply[4 : 4 + length], key)


def piece(address: tuple[str, int], piece_hash: str) -> bytes:
    """A piece's bytes as a daemon sends them (unverified)."""
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(frame({"op": "piece", "hash": piece_hash}))
        reader = sock.makefile("rb")
        (length,) = struct.unpack(">I", reader.read(4))
        reply = decode(reader.read(length))
        assert "size" in reply, reply
        return reader.read(reply["size"])


def status(address: tuple[str, int], key: SwarmKey | None = None) -> dict[str, Any]:
    reply = exchange(address, encode({"op": "status"}, key), key)
    assert reply is not None, "the daemon closed a status request without a reply"
    return reply


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while True:
        try:
            chunk = sock.recv(1 << 16)
        except (ConnectionResetError, TimeoutError):
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def closed_by_peer(sock: socket.socket) -> bool:
    """Whether the other end has closed `sock` (without blocking)."""
    sock.setblocking(False)
    try:
        return sock.recv(1 << 16) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def wait_until(condition: Any, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status_file:
        for line in status_file:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for process {pid}")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))
