"""The threaded data plane against real sockets: whole pieces, pipelined requests on a lane,
stalls, aborts, refusals, stale kept-alive connections, `sendfile` of a piece file, and the
origin's kept-alive HTTP connections."""

import functools
import os
import socket
import threading
import time
from collections.abc import Callable
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from shipyard.distribute.origin import HttpOrigin
from shipyard.distribute.transfer import Aborted, Lane, LaneReset, PieceCall, send_piece
from shipyard.distribute.wire import PeerBusy, PeerGone, PeerUnavailable, encode
from shipyard.errors import NotFound, StorageError

from .conftest import ACCEPTED, BytesSink, answer_each, read_request

BODY = os.urandom(300_000)


def body_for(piece_hash: object) -> bytes:
    return str(piece_hash).encode() + BODY


def serve_pieces(conn: socket.socket) -> None:
    def piece(request: dict[str, object]) -> bytes:
        body = body_for(request["hash"])
        return encode({"size": len(body), "have": request["have"]}) + body

    answer_each(conn, piece)


def fetch(lane: Lane, call: PieceCall | None = None, piece_hash: str = "ab" * 32) -> bytes:
    request = {"op": "piece", "hash": piece_hash, "have": "AQ=="}
    sink = BytesSink()
    reply = lane.fetch(call or PieceCall(), request, sink)
    assert reply["have"] == "AQ=="
    return bytes(sink.data)


def lane_to(address: tuple[str, int]) -> Lane:
    return Lane(address, connect_timeout=1.0, idle_timeout=0.5)


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition never became true"
        time.sleep(0.01)


def test_whole_piece_over_a_reused_connection(peer) -> None:  # type: ignore[no-untyped-def]
    lane = lane_to(peer(serve_pieces))
    assert fetch(lane) == body_for("ab" * 32)
    assert fetch(lane) == body_for("ab" * 32)  # the kept connection served the second too
    assert len(ACCEPTED) == 1


def test_requests_on_a_lane_are_pipelined_and_answered_in_order(peer) -> None:  # type: ignore[no-untyped-def]
    def wait_for_the_next_request_first(conn: socket.socket) -> None:
        # Replying only once the next request has arrived proves the lane sent it without
        # waiting for this reply.
        with conn:
            requests = [read_request(conn) for _ in range(3)]
            for request in requests:
                body = body_for(request["hash"])
                conn.sendall(encode({"size": len(body), "have": request["have"]}) + body)

    lane = lane_to(peer(wait_for_the_next_request_first))
    hashes = [f"{i:064x}" for i in range(3)]
    got: dict[str, bytes] = {}

    def one(piece_hash: str) -> None:
        got[piece_hash] = fetch(lane, piece_hash=piece_hash)

    # In whatever order the threads send them, each caller reads the reply to its own request.
    threads = [threading.Thread(target=one, args=(h,)) for h in hashes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=5)
    assert got == {h: body_for(h) for h in hashes}
    assert len(ACCEPTED) == 1


def test_aborting_a_request_resets_the_ones_queued_behind_it(peer) -> None:  # type: ignore[no-untyped-def]
    queued_arrived = threading.Event()

    def trickle(conn: socket.socket) -> None:
        with conn:
            read_request(conn)
            conn.sendall(encode({"size": len(BODY)}) + BODY[:10])
            while conn.recv(1 << 16):  # take the queued request, never answer it
                queued_arrived.set()

    lane = lane_to(peer(trickle))
    head = PieceCall()
    failures: dict[str, type[Exception]] = {}

    def fetch_noting_failure(name: str, call: PieceCall) -> None:
        try:
            fetch(lane, call)
        except PeerUnavailable as exc:
            failures[name] = type(exc)

    first = threading.Thread(target=fetch_noting_failure, args=("head", head))
    second = threading.Thread(target=fetch_noting_failure, args=("queued", PieceCall()))
    first.start()
    wait_until(lambda: head.active_since is not None)  # the head is reading its reply
    second.start()
    assert queued_arrived.wait(10)  # the second request went out behind it
    head.abort()
    first.join(timeout=5)
    second.join(timeout=5)
    assert failures == {"head": Aborted, "queued": LaneReset}  # neither is the peer's fault


def test_a_refused_connection_means_the_peer_is_gone() -> None:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        address = probe.getsockname()  # closed on exit: nothing listens there any more
    with pytest.raises(PeerGone):
        fetch(lane_to(address))


def test_a_kept_connection_the_peer_closed_is_retried_fresh(peer) -> None:  # type: ignore[no-untyped-def]
    closed = threading.Event()

    def one_request(conn: socket.socket) -> None:
        with conn:
            request = read_request(conn)
            conn.sendall(encode({"size": len(BODY), "have": request["have"]}) + BODY)
        closed.set()

    lane = lane_to(peer(one_request))
    assert fetch(lane) == BODY
    assert closed.wait(10)  # the peer has closed the kept connection
    assert fetch(lane) == BODY
    assert len(ACCEPTED) == 2


def test_a_stalled_sender_fails_after_the_idle_timeout(peer) -> None:  # type: ignore[no-untyped-def]
    done = threading.Event()

    def stall(conn: socket.socket) -> None:
        with conn:
            read_request(conn)
            conn.sendall(encode({"size": len(BODY)}) + BODY[:1000])
            done.wait(30)  # sends nothing more, and keeps the connection open, until the end

    lane = lane_to(peer(stall))
    try:
        with pytest.raises(PeerUnavailable, match="idle timeout"):
            fetch(lane)  # were there no idle timeout, this would wait for the connection's end
    finally:
        done.set()


def test_abort_ends_a_blocked_receive(peer) -> None:  # type: ignore[no-untyped-def]
    done = threading.Event()

    def trickle(conn: socket.socket) -> None:
        with conn:
            read_request(conn)
            conn.sendall(encode({"size": len(BODY)}))
            # A byte every 0.1 s, never idle long enough to time out, until the test ends.
            while not done.wait(0.1):
                try:
                    conn.sendall(b"x")
                except OSError:
                    return

    lane = lane_to(peer(trickle))
    call = PieceCall()
    failed: list[Exception] = []

    def receive() -> None:
        try:
            fetch(lane, call)
        except PeerUnavailable as exc:
            failed.append(exc)

    receiver = threading.Thread(target=receive)
    try:
        receiver.start()
        wait_until(lambda: call.active_since is not None)  # blocked receiving the trickle
        call.abort()
        receiver.join(timeout=10)
        assert not receiver.is_alive() and len(failed) == 1  # ended, though the trickle goes on
    finally:
        done.set()


def test_busy_reply_is_raised_as_busy(peer) -> None:  # type: ignore[no-untyped-def]
    def busy(conn: socket.socket) -> None:
        with conn:
            read_request(conn)
            conn.sendall(encode({"error": "all 4 upload slots are in use", "kind": "PeerBusy"}))

    with pytest.raises(PeerBusy):
        fetch(lane_to(peer(busy)))


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
        send_piece(sender.fileno(), b"HEAD", handle.fileno(), (0, len(BODY) * 4), 2.0)
    sender.close()
    reader.join()
    receiver.close()
    assert bytes(got) == b"HEAD" + BODY * 4


class CountingServer(ThreadingHTTPServer):
    connections = 0
    closed = 0

    def get_request(self):  # type: ignore[no-untyped-def]
        self.connections += 1
        return super().get_request()

    def shutdown_request(self, request):  # type: ignore[no-untyped-def]
        super().shutdown_request(request)
        self.closed += 1


class KeepAlive(SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 0.3  # the server closes a connection idle this long, as object stores do

    def log_message(self, *args: object) -> None:
        """Quiet: the test counts connections, not log lines."""


def test_http_origin_reuses_kept_alive_connections(tmp_path: Path) -> None:
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
        wait_until(lambda: server.closed == 1)  # the server closed the idle connection
        assert origin.get("pieces/p1") == BODY  # so the get retries afresh
        assert server.connections == 2
        # A warmed origin connects before its first request, and that request uses it.
        warmed = HttpOrigin(f"http://127.0.0.1:{server.server_address[1]}")
        warmed.warm()
        wait_until(lambda: server.connections == 3)
        assert warmed.get("pieces/p1") == BODY
        warmed.warm()  # one is idle already
        assert warmed.get("pieces/p1") == BODY
        assert server.connections == 3
    finally:
        server.shutdown()
        server.server_close()


def test_warming_an_unreachable_origin_leaves_the_error_to_get() -> None:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]  # closed on exit: nothing listens there any more
    origin = HttpOrigin(f"http://127.0.0.1:{port}")
    origin.warm()
    with pytest.raises(StorageError, match=f"127.0.0.1:{port}"):
        origin.get("pieces/p1")
