"""Peer memory talks to members only, takes only what this rank's save announced, and bounds
what any connection can cost it: memory, time and threads. Garbage closes that connection only.

The attacks run for real over sockets; where memory or threads are measured, the server runs in
a process of its own (`peer_server.py`) and is read from /proc.
"""

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shipyard.checkpoint import PeerMemory
from shipyard.checkpoint.peer import MANIFEST_OWNER, _request, push
from shipyard.checkpoint.peer_wire import MAX_HEADER_BYTES
from shipyard.distribute.swarm_key import SwarmKey
from shipyard.distribute.wire import encode
from shipyard.errors import StorageError

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SECRET = secrets.token_hex(16).encode()
GIB = 1 << 30
WAIT_S = 120.0  # for what must happen eventually; never a measure of speed


def _frame(header: bytes) -> bytes:
    return len(header).to_bytes(4, "big") + header


def _connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=WAIT_S)


def _closed_without_reply(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _steps(address: str) -> object:
    reply, _ = _request(address, {"op": "steps"}, SwarmKey(SECRET))
    return reply.get("steps")


@dataclass
class Server:
    proc: subprocess.Popen[str]
    address: str

    def status(self, field: str) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
        raise AssertionError(f"no {field} in /proc/{self.proc.pid}/status")


@pytest.fixture
def server() -> Iterator[Server]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "peer_server.py")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(SECRET.decode() + "\n")
    proc.stdin.flush()
    address = proc.stdout.readline().strip()
    try:
        yield Server(proc, address)
    finally:
        proc.stdin.close()
        proc.wait(timeout=WAIT_S)


@pytest.fixture
def peer() -> Iterator[PeerMemory]:
    memory = PeerMemory(SECRET, header_timeout_s=1.0, idle_timeout_s=1.0)
    memory.hold(3, MANIFEST_OWNER, [memoryview(b"manifest")])
    try:
        yield memory
    finally:
        memory.close()


@pytest.mark.parametrize("signed", [False, True])
def test_a_declared_gibibyte_allocates_nothing(server: Server, signed: bool) -> None:
    """20 connections each declare a 1 GiB put and send nothing more: the server's RSS stays."""
    before = server.status("VmRSS")
    header = {"op": "put", "step": 5, "owner": 0, "size": GIB}
    member = SwarmKey(SECRET)
    socks = [_connect(server.address) for _ in range(20)]
    try:
        for sock in socks:  # each signed afresh: a copy would be refused as a replay
            sock.sendall(encode(header, member) if signed else _frame(json.dumps(header).encode()))
        for sock in socks:  # refused: a stranger unanswered, a member told why, both closed
            if signed:
                reply = sock.recv(MAX_HEADER_BYTES)
                assert b"expects 1024 bytes" in reply
            assert _closed_without_reply(sock)
        assert server.status("VmRSS") - before < 64 * 1024  # KiB: nowhere near one GiB
    finally:
        for sock in socks:
            sock.close()
    assert _steps(server.address) == [3]


def test_a_silent_or_stalled_connection_is_timed_out(server: Server) -> None:
    with _connect(server.address) as silent, _connect(server.address) as half:
        half.sendall(_frame(b'{"op": "get", "size": 0, "step": 3')[:-5])  # never finished
        assert _closed_without_reply(silent)
        assert _closed_without_reply(half)
    # A member's announced put that stalls mid-payload is dropped, and not held.
    with _connect(server.address) as stalled:
        stalled.sendall(
            encode({"op": "put", "step": 5, "owner": 0, "size": 1024}, SwarmKey(SECRET))
        )
        stalled.sendall(b"x" * 100)
        assert _closed_without_reply(stalled)
    reply, _ = _request(server.address, {"op": "get", "step": 5, "owner": 0}, SwarmKey(SECRET))
    assert reply["ok"] is False


def test_connections_are_capped(server: Server) -> None:
    """40 idle connections: the server serves 4 at a time (threads bounded); the rest wait in
    the backlog, are timed out in turn, and a member is served after them."""
    base = server.status("Threads")
    socks = [_connect(server.address) for _ in range(40)]
    try:
        time.sleep(0.5)  # let the server accept what it will; the bound holds whenever read
        assert server.status("Threads") <= base + 4
        assert _steps(server.address) == [3]  # served once the idle ones time out
    finally:
        for sock in socks:
            sock.close()


def test_a_stranger_is_refused_and_cannot_put(peer: PeerMemory) -> None:
    peer.expect(5, 0, 4)
    stranger = SwarmKey(secrets.token_hex(16).encode())
    with pytest.raises(ConnectionError):  # dropped unanswered: it learns nothing
        push(peer.address, 5, 0, [memoryview(b"evil")], stranger)
    with _connect(peer.address) as sock:  # unsigned, in the old format or the new
        sock.sendall(_frame(json.dumps({"op": "put", "step": 5, "owner": 0, "size": 4}).encode()))
        sock.sendall(b"evil")
        assert _closed_without_reply(sock)
    assert (5, 0) not in peer._held
    push(peer.address, 5, 0, [memoryview(b"good")], peer.client_key())  # a member's is taken
    assert bytes(peer._held[(5, 0)][0]) == b"good"


@pytest.mark.parametrize(
    ("step", "owner", "size", "why"),
    [
        (10**12, MANIFEST_OWNER, 8, "no snapshot"),  # a far-future "committed" manifest
        (10**12, 0, 4, "no snapshot"),
        (5, 1, 4, "no snapshot"),  # the wrong owner
        (5, 0, 5, "expects 4 bytes"),  # the wrong size
    ],
)
def test_a_members_unannounced_put_is_refused(
    peer: PeerMemory, step: int, owner: int, size: int, why: str
) -> None:
    peer.expect(5, 0, 4)
    with pytest.raises(StorageError, match=why):
        push(peer.address, step, owner, [memoryview(b"x" * size)], peer.client_key())
    assert peer.steps() == [3] and (step, owner) not in peer._held
    assert _steps(peer.address) == [3]  # nothing far-future is advertised


def test_an_announced_put_is_taken_once(peer: PeerMemory) -> None:
    peer.expect(5, 0, 4)
    push(peer.address, 5, 0, [memoryview(b"good")], peer.client_key())
    with pytest.raises(StorageError, match="no snapshot"):
        push(peer.address, 5, 0, [memoryview(b"evil")], peer.client_key())
    assert bytes(peer._held[(5, 0)][0]) == b"good"


def test_a_recorded_request_cannot_be_played_again(peer: PeerMemory) -> None:
    message = encode({"op": "steps", "size": 0}, peer.client_key())
    for expected_reply in (True, False):
        with _connect(peer.address) as sock:
            sock.sendall(message)
            assert (sock.recv(MAX_HEADER_BYTES) != b"") is expected_reply


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize(
    "message",
    [
        (MAX_HEADER_BYTES + 1).to_bytes(4, "big"),  # a header larger than any request
        (1 << 31).to_bytes(4, "big"),
        _frame(b"[" * 60_000),  # nested past the JSON parser's limit
        _frame(b"[1, 2]"),  # not an object
        _frame(json.dumps({"op": "get", "size": -1}).encode()),
        _frame(b"\xff\xfe not json"),
        encode({"op": "get", "size": -1}, SwarmKey(SECRET)),  # signed, and still wrong
        encode({"op": "get", "size": "0"}, SwarmKey(SECRET)),
        encode({"op": "get", "size": 0, "step": [1]}, SwarmKey(SECRET)),
        encode({"op": "get", "size": 0, "step": True}, SwarmKey(SECRET)),
        encode({"op": "get", "size": 0, "step": 1e300}, SwarmKey(SECRET)),
        encode({"op": "get", "size": 0, "owner": -2}, SwarmKey(SECRET)),
        encode({"size": 0}, SwarmKey(SECRET)),  # no op
    ],
)
def test_a_bad_request_closes_its_connection_only(peer: PeerMemory, message: bytes) -> None:
    with _connect(peer.address) as sock:
        sock.sendall(message)
        with contextlib.suppress(OSError):  # already closed by the server
            sock.shutdown(socket.SHUT_WR)
        assert _closed_without_reply(sock)
    assert _steps(peer.address) == [3]


@pytest.mark.fuzz
@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    raw=st.binary(max_size=200),
    header=st.dictionaries(
        st.sampled_from(["op", "step", "owner", "size", "ts", "nonce", "x"]),
        st.none()
        | st.booleans()
        | st.integers(-(2**70), 2**70)
        | st.floats(allow_nan=False)
        | st.text(max_size=10)
        | st.sampled_from(["put", "get", "steps"]),
        max_size=6,
    ),
    sign=st.booleans(),
)
def test_the_wire_parser_survives_anything(
    peer: PeerMemory, raw: bytes, header: dict[str, object], sign: bool
) -> None:
    """Random bytes, or a random header (signed or not) with random bytes after it: the server
    never raises in its thread, never takes a snapshot, and keeps serving members."""
    message = encode(header, SwarmKey(SECRET)) + raw if sign else raw
    # The server may close at any point, our bytes unread.
    with _connect(peer.address) as sock, contextlib.suppress(OSError):
        sock.sendall(message)
        sock.shutdown(socket.SHUT_WR)
        while sock.recv(1 << 16):
            pass
    assert set(peer._held) == {(3, MANIFEST_OWNER)}
    assert _steps(peer.address) == [3]
