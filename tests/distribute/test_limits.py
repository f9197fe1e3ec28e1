"""What a live daemon lets anyone who reaches its port cost it: header sizes, connections, the
membership view, heartbeats, HTTP heads. Each refusal leaves the daemon serving, with no
traceback in its log."""

import contextlib
import socket
import struct
import time
from typing import Any

from shipyard.distribute.limits import HEADER_BUDGET
from shipyard.distribute.membership import MAX_AHEAD_MS, MAX_MEMBERS
from shipyard.distribute.messages import VIEW_MEMBERS
from shipyard.distribute.wire import MAX_HEADER

from .rawwire import closed_by_peer, exchange, frame, open_fds, rss_mib, status, wait_until

MiB = 1 << 20


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def refused(peer: Any, reason: str) -> float:
    return peer.metrics().get(f'shipyard_peer_requests_refused_total{{reason="{reason}"}}', 0)


def assert_serving(peer: Any) -> None:
    assert status(peer.port)["me"] == peer.address
    assert peer.proc.poll() is None
    assert "Traceback" not in peer.log.read_text()


def own_heartbeat(peer: Any) -> int:
    reply = exchange(peer.port, frame({"op": "gossip", "view": {}}))
    assert reply is not None
    heartbeat: int = reply["view"][peer.address][0]
    return heartbeat


def test_an_oversized_header_is_refused_and_the_daemon_keeps_serving(cluster: Any) -> None:
    peer = cluster.peer("p", []).start()
    reply = exchange(peer.port, struct.pack(">I", MAX_HEADER + 1) + b"{}")
    assert reply == {
        "error": f"peer header of {MAX_HEADER + 1} bytes exceeds {MAX_HEADER}",
        "kind": "HeaderTooLarge",
    }
    assert refused(peer, "too_large") == 1
    assert_serving(peer)


def test_half_sent_headers_stay_within_the_budget_and_are_dropped(cluster: Any) -> None:
    peer = cluster.peer("p", []).start()
    status(peer.port)
    before = rss_mib(peer.proc.pid)
    half_sent = []
    for _ in range(64):  # 64 MiB declared, most of it sent, none of it finished
        sock = socket.create_connection(peer.port)
        with contextlib.suppress(OSError):  # refused while sending: the budget was spent
            sock.sendall(struct.pack(">I", MAX_HEADER) + b" " * (MAX_HEADER - 1024))
        half_sent.append(sock)
    grown = rss_mib(peer.proc.pid) - before
    assert grown < HEADER_BUDGET / MiB + 16, f"RSS grew {grown:.0f} MiB"
    # Each is refused at once or dropped once the idle timeout (4 s) passes without the rest.
    wait_until(lambda: all(closed_by_peer(s) for s in half_sent), what="half-sent headers dropped")
    for sock in half_sent:
        sock.close()
    assert refused(peer, "busy") > 0  # no more than the budget were read at once
    assert_serving(peer)


def test_silent_connections_past_the_cap_make_room_for_requests(cluster: Any) -> None:
    peer = cluster.peer("p", [], "--max-connections", "16").start()
    status(peer.port)
    fds = open_fds(peer.proc.pid)
    silent = [socket.create_connection(peer.port) for _ in range(100)]
    # Every request is answered, each in the place of the longest-silent connection.
    for _ in range(5):
        assert_serving(peer)
    wait_until(lambda: sum(closed_by_peer(s) for s in silent) >= 100 - 16, what="silent closed")
    assert open_fds(peer.proc.pid) <= fds + 16 + 8  # some slack for files the daemon opens
    for sock in silent:
        sock.close()


def test_a_gossip_flood_is_capped(cluster: Any) -> None:
    peer = cluster.peer("p", []).start()
    beat = [now_ms(), {}]
    too_many = {f"10.0.{i >> 8}.{i & 255}:7000": beat for i in range(VIEW_MEMBERS + 1)}
    reply = exchange(peer.port, frame({"op": "gossip", "view": too_many}))
    assert reply is not None and reply["kind"] == "InvalidInput"
    assert f"names {VIEW_MEMBERS + 1} members, more than {VIEW_MEMBERS}" in reply["error"]
    assert status(peer.port)["members_alive"] == 0
    for start in range(0, 2 * MAX_MEMBERS, VIEW_MEMBERS):  # twice the view in allowed messages
        members = range(start, start + VIEW_MEMBERS)
        view = {f"10.{i >> 16}.{i >> 8 & 255}.{i & 255}:7000": beat for i in members}
        reply = exchange(peer.port, frame({"op": "gossip", "view": view}))
        assert reply is not None and len(reply["view"]) <= VIEW_MEMBERS
    # The records stop at the cap (see test_membership); those heard in the last seconds live.
    assert 0 < status(peer.port)["members_alive"] <= MAX_MEMBERS - 1
    assert_serving(peer)


def test_absurd_heartbeats_are_refused(cluster: Any) -> None:
    peer = cluster.peer("p", []).start()
    me = peer.address
    for absurd in (b"[1e999,{}]", b"[Infinity,{}]", b"[NaN,{}]", b"[%d,{}]" % 10**300, b"[-1,{}]"):
        body = b'{"op":"gossip","view":{"%s":%s}}' % (me.encode(), absurd)
        reply = exchange(peer.port, frame(body))
        assert reply is not None and reply["kind"] == "InvalidInput", (absurd, reply)
    # Well formed, but two days ahead of any clock: neither adopted as its own nor as a member's.
    ahead = now_ms() + 2 * MAX_AHEAD_MS
    view = {me: [ahead, {}], "10.1.1.1:7000": [ahead, {}]}
    assert exchange(peer.port, frame({"op": "gossip", "view": view})) is not None
    wait_until(lambda: abs(own_heartbeat(peer) - now_ms()) < 60_000, what="a fresh heartbeat")
    assert status(peer.port)["members_alive"] == 0
    assert refused(peer, "malformed") == 5
    assert_serving(peer)


def test_nested_json_and_bad_fields_are_refused_by_name(cluster: Any) -> None:
    peer = cluster.peer("p", []).start()
    nested = b'{"op":"gossip","view":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    cases = {
        nested: "nested too deep",
        b"\xff\xfe": "not JSON",
        b"[1, 2]": "not a JSON object",
        b'{"op":"launch"}': "unknown op 'launch'",
        b'{"op":"piece","hash":"../../etc/passwd"}': "piece: hash '../../etc/passwd' is not 64",
        b'{"op":"have","artifact":"' + b"a" * 64 + b'","from":"x","have":""}': "have: from 'x'",
        b'{"op":"fetch","artifact":"' + b"a" * 64 + b'","pieces":7}': "fetch: pieces is not",
    }
    for body, why in cases.items():
        reply = exchange(peer.port, frame(body))
        assert reply is not None and why in reply["error"], (body[:60], reply)
    assert_serving(peer)


def test_http_heads_too_long_or_elsewhere_are_refused(cluster: Any) -> None:
    peer = cluster.peer("p", []).start()
    long_line = b"GET /metrics HTTP/1.1\r\nX-Long: " + b"a" * 70_000 + b"\r\n\r\n"
    for head, answer in (
        (long_line, b"HTTP/1.0 431 "),
        (b"GET /admin HTTP/1.1\r\n\r\n", b"HTTP/1.0 404 "),
        (b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", b"HTTP/1.0 200 "),
    ):
        with socket.create_connection(peer.port, timeout=10) as sock:
            sock.sendall(head)
            assert sock.recv(len(answer), socket.MSG_WAITALL) == answer
    assert refused(peer, "http") == 2
    assert_serving(peer)
