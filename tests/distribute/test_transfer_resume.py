"""The data plane resuming pieces: a request from an offset, a sender that ignores it, a sink
that refuses bytes without throwing the lane out of step, and the origin's `Range` requests."""

import functools
import os
import re
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from shipyard.distribute.origin import HttpOrigin
from shipyard.distribute.transfer import Lane, PieceCall, piece_request
from shipyard.distribute.wire import encode
from shipyard.store.partial import SinkError

from .conftest import ACCEPTED, BytesSink, answer_each

BODY = os.urandom(600_000)
Peer = Callable[[Callable[[socket.socket], None]], tuple[str, int]]


def serve_from_offsets(conn: socket.socket) -> None:
    """Answer piece requests with the bytes from each request's offset on."""

    def rest(request: dict[str, object]) -> bytes:
        offset = int(str(request.get("offset", 0)))
        header = {"size": len(BODY) - offset} | ({"offset": offset} if offset else {})
        return encode(header) + BODY[offset:]

    answer_each(conn, rest)


def serve_whole(conn: socket.socket) -> None:
    """A sender that does not resume pieces: every reply is the whole piece."""
    answer_each(conn, lambda _: encode({"size": len(BODY)}) + BODY)


def lane_to(address: tuple[str, int]) -> Lane:
    return Lane(address, connect_timeout=1.0, idle_timeout=2.0)


def fetch(lane: Lane, sink: BytesSink) -> None:
    request = piece_request("ab" * 32, "cd" * 32, "127.0.0.1:9", 0, False, sink.kept)
    lane.fetch(PieceCall(), request, sink)


def test_a_request_with_kept_bytes_gets_only_the_rest(peer: Peer) -> None:
    sink = BytesSink(kept=BODY[:250_000])
    fetch(lane_to(peer(serve_from_offsets)), sink)
    assert sink.received == len(BODY) - 250_000
    assert bytes(sink.data) == BODY


def test_a_sender_that_ignores_the_offset_has_the_piece_taken_whole(peer: Peer) -> None:
    sink = BytesSink(kept=b"stale bytes")
    fetch(lane_to(peer(serve_whole)), sink)
    assert (sink.kept, sink.received) == (0, len(BODY))
    assert bytes(sink.data) == BODY


class FullDisk(BytesSink):
    def write(self, data: memoryview) -> None:
        if self.received + len(data) > 300_000:
            raise SinkError("cannot write partial piece: disk full")
        super().write(data)


def test_a_sink_that_refuses_bytes_leaves_the_lane_in_step(peer: Peer) -> None:
    """The rest of the refused piece is read and dropped, so the next request on the same
    connection gets its own reply, not the tail of the last one."""
    lane = lane_to(peer(serve_from_offsets))
    with pytest.raises(SinkError, match="disk full"):
        fetch(lane, FullDisk())
    sink = BytesSink()
    fetch(lane, sink)
    assert bytes(sink.data) == BODY
    assert len(ACCEPTED) == 1


class Ranged(SimpleHTTPRequestHandler):
    """A static server that answers `Range: bytes=N-` as object stores do."""

    protocol_version = "HTTP/1.1"
    ranges: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        asked = self.headers.get("Range")
        match = re.fullmatch(r"bytes=(\d+)-", asked or "")
        if match is None:
            super().do_GET()
            return
        self.ranges.append(str(asked))
        data = Path(self.translate_path(self.path)).read_bytes()
        start = int(match.group(1))
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        self.wfile.write(data[start:])

    def log_message(self, *args: object) -> None:
        """Quiet."""


@contextmanager
def origin_over(directory: Path, handler: type[SimpleHTTPRequestHandler]) -> Iterator[HttpOrigin]:
    """An origin client of a static HTTP server over `directory`, which holds one piece."""
    (directory / "pieces").mkdir(exist_ok=True)
    (directory / "pieces" / "p1").write_bytes(BODY)
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=directory))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield HttpOrigin(f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()


def test_the_origin_is_asked_for_the_rest_with_a_range(tmp_path: Path) -> None:
    with origin_over(tmp_path, Ranged) as origin:
        sink = BytesSink(kept=BODY[:100_000])
        origin.read_into("pieces/p1", sink)
        assert Ranged.ranges == ["bytes=100000-"]
        assert (sink.kept, sink.received) == (100_000, len(BODY) - 100_000)
        assert bytes(sink.data) == BODY
        whole = BytesSink()
        origin.read_into("pieces/p1", whole)  # nothing kept: a plain GET on the same connection
        assert bytes(whole.data) == BODY and Ranged.ranges == ["bytes=100000-"]


class Quiet(SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        """Quiet."""


def test_an_origin_that_ignores_ranges_sends_the_piece_whole(tmp_path: Path) -> None:
    with origin_over(tmp_path, Quiet) as origin:
        sink = BytesSink(kept=BODY[:100_000])
        origin.read_into("pieces/p1", sink)
        assert (sink.kept, sink.received) == (0, len(BODY))
        assert bytes(sink.data) == BODY
