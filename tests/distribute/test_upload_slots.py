"""A daemon's upload slots: requests from outside the mesh are turned away once its few slots are
taken, while its downstream peers' lanes have slots of their own, one for each lane they may
open, that no other request can take."""

import os
import socket
import struct
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from shipyard.distribute.catch_up import CATCH_UP_WIDTH
from shipyard.distribute.config import DaemonConfig
from shipyard.distribute.transfer import Lane, PieceCall, piece_request
from shipyard.distribute.wire import PeerBusy, encode
from shipyard.hashing import sha256_hex
from shipyard.store import LocalBackend, PieceStore, put_tree

from .conftest import BytesSink

BIG = 16 << 20  # a piece far larger than the socket buffers, so an unread upload stays open


@contextmanager
def stalled_upload(address: tuple[str, int], request: dict[str, Any]) -> Iterator[None]:
    """A piece request whose body is never read: the upload holds its slot until the sender's
    idle timeout. Returns once the reply's header has come, so the slot is taken by then."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)  # before the window is set
    sock.settimeout(10)
    sock.connect(address)
    sock.sendall(encode(request))
    (length,) = struct.unpack(">I", sock.recv(4, socket.MSG_WAITALL))
    assert b'"size"' in sock.recv(length, socket.MSG_WAITALL)  # a piece is coming, not an error
    try:
        yield
    finally:
        sock.close()


def test_downstream_peers_keep_their_own_upload_slots(cluster: Any, tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "blob.bin").write_bytes(os.urandom(BIG))
    manifest = put_tree(PieceStore(LocalBackend(tmp_path / "seed")), source, "model", BIG)
    seeder = cluster.seeder("seeder", [], tmp_path / "seed").start()
    address = seeder.port
    piece = manifest.files[0].pieces[0].hash

    def request(relay: bool) -> dict[str, Any]:
        return piece_request(piece, manifest.id, "127.0.0.1:9", 0, relay)

    def fetch(relay: bool) -> bytes:
        sink = BytesSink()
        Lane(address, 1.0, 4.0).fetch(PieceCall(), request(relay), sink)
        return bytes(sink.data)

    config = DaemonConfig(address, str(tmp_path))
    relay_slots = config.mesh_degree * CATCH_UP_WIDTH
    with ExitStack() as held:
        for _ in range(config.upload_slots):
            held.enter_context(stalled_upload(address, request(relay=False)))
        with pytest.raises(PeerBusy):
            fetch(relay=False)
        for _ in range(relay_slots - 1):
            held.enter_context(stalled_upload(address, request(relay=True)))
        # Every other slot is taken, yet a downstream peer's last lane is still served.
        assert sha256_hex(fetch(relay=True)) == piece
        held.enter_context(stalled_upload(address, request(relay=True)))
        with pytest.raises(PeerBusy):
            fetch(relay=True)
