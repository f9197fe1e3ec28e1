"""Peer memory answers garbage by closing that connection, and keeps serving everyone else."""

import json
import socket

import pytest

from shipyard.checkpoint import PeerMemory
from shipyard.checkpoint.peer import MAX_HEADER_BYTES, _request


def _frame(header: bytes) -> bytes:
    return len(header).to_bytes(8, "little") + header


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize(
    "message",
    [
        (MAX_HEADER_BYTES + 1).to_bytes(8, "little"),  # a header larger than any request
        _frame(b"[" * 60_000),  # nested past the JSON parser's limit
        _frame(b"[1, 2]"),  # not an object
        _frame(json.dumps({"op": "get", "size": -1}).encode()),
        _frame(json.dumps({"op": "get", "size": "0"}).encode()),
        _frame(json.dumps({"op": "get", "size": 0, "step": [1]}).encode()),
        _frame(json.dumps({"op": "get", "size": 0, "step": 1e999}).encode()),
        _frame(json.dumps({"size": 0}).encode()),  # no op
        _frame(b"\xff\xfe not json"),
    ],
)
def test_a_bad_request_closes_its_connection_only(message: bytes) -> None:
    peer = PeerMemory()
    try:
        peer.hold(3, -1, [memoryview(b"manifest")])
        host, port = peer.address.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(message)
            assert sock.recv(1) == b""  # closed without a reply
        reply, _ = _request(peer.address, {"op": "steps"})
        assert reply == {"ok": True, "steps": [3], "size": 0}
    finally:
        peer.close()
