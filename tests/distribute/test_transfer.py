"""The threaded data plane against real sockets: whole pieces, stalls, aborts, stale pooled
connections, `sendfile` of a piece file, and the origin's kept-alive HTTP connections."""

import functools
import json
import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from shipyard.distribute.origin import HttpOrigin
from shipyard.distribute.transfer import Connections, PieceCall, fetch_piece, send_piece
from shipyard.distribute.wire import PeerBusy, PeerUnavailable, encode
from shipyard.errors import NotFound

BODY = os.urandom(300_000)


def read_request(conn: socket.socket) -> dict[str, object]:
    (length,) = struct.unpack(">I", conn.recv(4, socket.MSG_WAITALL))
    request: dict[str, object] = json.loads(conn.recv(length, socket.MSG_WAITALL))
    return request


@pytest.fixture
def peer() -> Iterator[Callable[[Callable[[socket.socket], None]], tuple[str, int]]]:
    """A listening socket whose accepted connections run `behave(conn)` on a thread."""
    listeners: list[socket.socket] = []

    def start(behave: Callable[[socket.socket], None]) -> tuple[str, int]:
        listener = socket.create_server(("127.0.0.1", 0))
        listeners.append(listener)

        def serve() -> None:
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                threading.Thread(target=behave, args=(conn,), daemon=True).start()

        threading.Thread(target=serve, daemon=True).start()
        host, port = listener.getsockname()
        return host, port

    yield start
    for listener in listeners:
        listener.close()


def serve_pieces(conn: socket.socket) -> None:
    """Answer piece requests on one connection until the requester hangs up."""
    with conn:
        while True:
            try:
                request = read_request(conn)
            except (struct.error, OSError):
                return
            conn.sendall(encode({"size": len(BODY), "have": request["have"]}) + BODY)


def fetch(address: tuple[str, int], pool: Connections, call: PieceCall | None = None) -> bytes:
    request = {"op": "piece", "hash": "ab" * 32, "have": "AQ=="}
    reply, body = fetch_piece(call or PieceCall(), address, request, 1.0, 0.5, pool)
    assert reply["have"] == "AQ=="
    return bytes(body)


def test_whole_piece_over_a_reused_connection(peer) -> None:  # type: ignore[no-untyped-def]
    address = peer(serve_pieces)
    pool = Connections(2)
    assert fetch(address, pool) == BODY
    assert fetch(address, pool) == BODY  # the pooled connection served the second request too
    assert len(pool._idle[address]) == 1


def test_a_pooled_connection_the_peer_closed_is_retried_fresh(peer) -> None:  # type: ignore[no-untyped-def]
    def one_request(conn: socket.socket) -> None:
        with conn:
            request = read_request(conn)
            conn.sendall(encode({"size": len(BODY), "have": request["have"]}) + BODY)

    address = peer(one_request)
    pool = Connections(2)
    assert fetch(address, pool) == BODY
    time.sleep(0.1)  # the peer has closed the pooled connection by now
    assert fetch(address, pool) == BODY


def test_a_stalled_sender_fails_after_the_idle_timeout(peer) -> None:  # type: ignore[no-untyped-def]
    def stall(conn: socket.socket) -> None:
        read_request(conn)
        conn.sendall(encode({"size": len(BODY)}) + BODY[:1000])
        time.sleep(3)
        conn.close()

    address = peer(stall)
    started = time.monotonic()
    with pytest.raises(PeerUnavailable, match="idle timeout"):
        fetch(address, Connections(2))
    assert time.monotonic() - started < 2.5  # the 0.5 s idle timeout, not the sender's 3 s


def test_abort_ends_a_blocked_receive(peer) -> None:  # type: ignore[no-untyped-def]
    def trickle(conn: socket.socket) -> None:
        read_request(conn)
        conn.sendall(encode({"size": len(BODY)}))
        for _ in range(100):  # a byte every 0.1 s: never idle long enough to time out
            try:
                conn.sendall(b"x")
            except OSError:
                return
            time.sleep(0.1)

    address = peer(trickle)
    call = PieceCall()
    threading.Timer(0.5, call.abort).start()
    started = time.monotonic()
    with pytest.raises(PeerUnavailable):
        fetch(address, Connections(2), call)
    assert time.monotonic() - started < 3  # not the 10 s the trickle would take


def test_busy_reply_is_raised_as_busy(peer) -> None:  # type: ignore[no-untyped-def]
    def busy(conn: socket.socket) -> None:
        with conn:
            read_request(conn)
            conn.sendall(encode({"error": "all 4 upload slots are in use", "kind": "PeerBusy"}))

    with pytest.raises(PeerBusy):
        fetch(peer(busy), Connections(2))


def test_send_piece_writes_header_then_the_whole_file(tmp_path: Path) -> None:
    piece = tmp_path / "piece"
    piece.write_bytes(BODY * 4)
    sender, receiver = socket.socketpair()
    sender.setblocking(False)  # as the event loop's sockets are
    got = bytearray()

    def drain() -> None:
        while chunk := receiver.recv(1 << 16):
            got.extend(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    with open(piece, "rb") as handle:
        send_piece(sender.fileno(), b"HEAD", handle.fileno(), len(BODY) * 4, 2.0)
    sender.close()
    reader.join()
    receiver.close()
    assert bytes(got) == b"HEAD" + BODY * 4


class CountingServer(ThreadingHTTPServer):
    connections = 0

    def get_request(self):  # type: ignore[no-untyped-def]
        self.connections += 1
        return super().get_request()


class KeepAlive(SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 0.3  # the server closes a connection idle this long, as object stores do

    def log_message(self, *args: object) -> None:
        """Quiet: the test counts connections, not log lines."""


def test_http_origin_keeps_one_connection_per_thread(tmp_path: Path) -> None:
    (tmp_path / "pieces").mkdir()
    (tmp_path / "pieces" / "p1").write_bytes(BODY)
    handler = functools.partial(KeepAlive, directory=str(tmp_path))
    server = CountingServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        origin = HttpOrigin(f"http://127.0.0.1:{server.server_address[1]}")
        assert all(origin.get("pieces/p1") == BODY for _ in range(5))
        assert server.connections == 1
        with pytest.raises(NotFound):
            origin.get("pieces/missing")
        time.sleep(0.6)  # the server has closed the idle connection: the get retries afresh
        assert origin.get("pieces/p1") == BODY
        assert server.connections == 2
    finally:
        server.shutdown()
        server.server_close()
