"""The peer wire protocol against one live daemon: valid requests with mutated fields, random
bytes, nested and non-finite JSON. After each, the daemon must still answer a piece request with
the right bytes, and nothing but the project's own errors may have reached its handlers' last
resort (`shipyard_peer_requests_refused_total{reason="error"}` stays absent)."""

import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shipyard.distribute.membership import encode_bits
from shipyard.hashing import sha256_hex
from shipyard.store import Manifest

from .conftest import Peer, make_artifact
from .rawwire import exchange, frame, piece, status

UNCAUGHT = 'shipyard_peer_requests_refused_total{reason="error"}'
HEX = "0123456789abcdef"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Peer, Manifest]]:
    root = tmp_path_factory.mktemp("fuzz")
    peer = Peer(root, "target", [], [])
    manifest = make_artifact(peer.store, root / "src", 3 * (256 << 10))
    peer.start()
    yield peer, manifest
    peer.kill()
    assert "Traceback" not in peer.log.read_text()


def templates(manifest: Manifest) -> list[dict[str, Any]]:
    """One valid request of each op the daemon answers."""
    piece = manifest.files[0].pieces[0].hash
    other = "127.0.0.1:9"  # nothing listens there: gossip back to it fails at once
    now = time.time_ns() // 1_000_000
    return [
        {"op": "gossip", "from": other, "view": {other: [now, {manifest.id: [True, "Bw=="]}]}},
        {"op": "have", "artifact": manifest.id, "from": other, "have": encode_bits(0b101)},
        {"op": "piece", "hash": piece, "artifact": manifest.id, "from": other,
         "have": encode_bits(1), "relay": False, "offset": 10},
        {"op": "manifest", "id": manifest.id},
        {"op": "fetch", "artifact": manifest.id, "pieces": [piece]},
        {"op": "status", "artifact": manifest.id},
    ]  # fmt: skip


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=70)
    | st.text(HEX, min_size=64, max_size=64),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)


@st.composite
def mutated(draw: st.DrawFn, manifest: Manifest) -> bytes:
    """A valid request with one field (perhaps nested) replaced, dropped or added."""
    request = draw(st.sampled_from(templates(manifest)))
    target = request
    path = [draw(st.sampled_from(sorted(request)))]
    while isinstance(target[path[-1]], dict) and target[path[-1]] and draw(st.booleans()):
        target = target[path[-1]]
        path.append(draw(st.sampled_from(sorted(target))))
    action = draw(st.sampled_from(["replace", "drop", "add"]))
    if action == "replace":
        target[path[-1]] = draw(json_values)
    elif action == "drop":
        del target[path[-1]]
    else:
        target[draw(st.text(max_size=10))] = draw(json_values)
    return frame(request)


def nested(depth: int, array: bool) -> bytes:
    opener, closer = (b"[", b"]") if array else (b'{"a":', b"}")
    return frame(b'{"op":"gossip","view":' + opener * depth + b"1" + closer * depth + b"}")


SPOT = 1234567  # where a special number goes in the requests below


def special_numbers(template: dict[str, Any], number: str) -> bytes:
    return frame(frame(template)[4:].replace(str(SPOT).encode(), number.encode()))


def frames(manifest: Manifest) -> st.SearchStrategy[bytes]:
    spots = [
        templates(manifest)[2] | {"offset": SPOT},
        {"op": "gossip", "view": {"127.0.0.1:9": [SPOT, {}]}},
        {"op": "fetch", "artifact": manifest.id, "pieces": SPOT},
    ]
    return st.one_of(
        mutated(manifest),
        st.binary(max_size=300).map(frame),  # well framed, any bytes
        st.binary(max_size=300),  # anything at all, the HTTP prefix included
        st.builds(nested, st.integers(1, 50_000), st.booleans()),
        st.builds(
            special_numbers,
            st.sampled_from(spots),
            st.sampled_from(["Infinity", "-Infinity", "NaN", "1e999", "9" * 5000, "1.5", "-0"]),
        ),
        st.builds(lambda n: struct.pack(">I", n), st.integers(0, 2**32 - 1)),  # a length alone
    )


def answers_correctly(peer: Peer, manifest: Manifest) -> None:
    assert status(peer.port)["me"] == peer.address
    ref = manifest.files[0].pieces[1]
    assert sha256_hex(piece(peer.port, ref.hash)) == ref.hash


@pytest.mark.fuzz
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_a_live_daemon_survives_any_frame(daemon: tuple[Peer, Manifest], data: Any) -> None:
    peer, manifest = daemon
    sent = data.draw(frames(manifest))
    exchange(peer.port, sent, timeout=3.0)  # a reply, a refusal or a closed connection
    answers_correctly(peer, manifest)
    log = peer.log.read_text()
    assert peer.metrics().get(UNCAUGHT, 0) == 0 and "Traceback" not in log, log[-2000:]
