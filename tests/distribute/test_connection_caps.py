"""Connections that trickle a request's header a byte at a time, from many addresses, cannot
lock real requests out of a daemon: each source has a share of the connections, a header must
arrive whole within the idle timeout of its first byte, and when every connection is taken the
one that has waited longest for its header makes room."""

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from shipyard.distribute.limits import source_key

from .rawwire import exchange, frame, wait_until

MAX_CONNECTIONS = 24
PER_SOURCE = 6
ATTACKERS = [f"127.0.0.{i}" for i in range(2, 8)]  # 6 addresses of 10 sockets each
SOCKETS_EACH = 10
DECLARED = 200  # header bytes each trickler promises and never finishes


def is_closed(sock: socket.socket) -> bool:
    """Whether the daemon closed (or answered, which it does only to refuse) `sock`."""
    try:
        return len(sock.recv(1 << 16, socket.MSG_DONTWAIT)) >= 0
    except BlockingIOError:
        return False
    except OSError:
        return True


class Trickle:
    """Sockets from `sources` that each declare a header, then send one byte of it every 0.5 s;
    a socket the daemon closes is opened again from its source at once."""

    def __init__(self, port: tuple[str, int], sources: list[str], each: int) -> None:
        self.port = port
        self.sources = [s for s in sources for _ in range(each)]
        self.socks: list[socket.socket | None] = [None] * len(self.sources)
        self.closed = 0  # sockets the daemon closed or refused
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _connect(self, source: str) -> socket.socket | None:
        try:
            sock = socket.create_connection(self.port, timeout=2, source_address=(source, 0))
            sock.sendall(struct.pack(">I", DECLARED))
        except OSError:
            return None
        return sock

    def _run(self) -> None:
        while not self.stop.is_set():
            for i, source in enumerate(self.sources):
                sock = self.socks[i]
                if sock is not None and is_closed(sock):
                    sock.close()
                    sock, self.closed = None, self.closed + 1
                if sock is None:
                    self.socks[i] = self._connect(source)
                    continue
                with contextlib.suppress(OSError):
                    sock.send(b" ", socket.MSG_DONTWAIT)
            self.stop.wait(0.5)

    def open_now(self) -> int:
        return sum(s is not None and not is_closed(s) for s in list(self.socks))

    def __enter__(self) -> "Trickle":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        for sock in self.socks:
            if sock is not None:
                sock.close()


@pytest.fixture
def capped(cluster: Any) -> Iterator[Any]:
    yield cluster.peer(
        "p", [], "--max-connections", str(MAX_CONNECTIONS),
        "--max-connections-per-source", str(PER_SOURCE),
    ).start()  # fmt: skip


def test_a_trickling_flood_from_many_addresses_leaves_real_requests_served(capped: Any) -> None:
    with Trickle(capped.port, ATTACKERS, SOCKETS_EACH) as flood:
        # The flood holds more connections than the daemon allows before a request is asked.
        wait_until(lambda: flood.closed > MAX_CONNECTIONS, timeout=60, what="the table full")
        failures = []
        for i in range(26):  # real requests, one after another, from an address of their own
            reply = exchange(capped.port, frame({"op": "status"}))
            if reply is None or reply.get("me") != capped.address:
                failures.append((i, reply))
        assert failures == []
        assert flood.open_now() <= MAX_CONNECTIONS
    metrics = capped.metrics()
    assert metrics.get('shipyard_peer_requests_refused_total{reason="evicted"}', 0) > 0
    assert "Traceback" not in capped.log.read_text()


def test_one_address_holds_no_more_than_its_share(capped: Any) -> None:
    """Silent connections may wait 20 s for a request: past its share, each newcomer from one
    address closes that address's longest waiting, and no other's."""
    other = socket.create_connection(capped.port)  # from 127.0.0.1, waiting like the rest
    own = [
        socket.create_connection(capped.port, source_address=("127.0.0.9", 0))
        for _ in range(3 * PER_SOURCE)
    ]
    wait_until(lambda: sum(map(is_closed, own)) >= 2 * PER_SOURCE, timeout=15, what="evictions")
    assert [is_closed(s) for s in own] == [True] * 2 * PER_SOURCE + [False] * PER_SOURCE
    assert not is_closed(other)
    for sock in [other, *own]:
        sock.close()


def test_a_header_sent_a_byte_at_a_time_is_dropped(capped: Any) -> None:
    """From its first byte, the whole header (length included) has the idle timeout (4 s): a
    byte every 0.5 s does not keep the connection, however long the header it declares."""
    data = struct.pack(">I", DECLARED) + b" " * 36  # 20 s of bytes at most
    with socket.create_connection(capped.port, source_address=("127.0.0.10", 0)) as sock:
        for byte in data:
            if is_closed(sock):
                break
            with contextlib.suppress(OSError):
                sock.send(bytes([byte]))
            time.sleep(0.5)
        assert is_closed(sock)


@pytest.mark.parametrize(
    ("peername", "key"),
    [
        (("10.1.2.3", 7000), "10.1.2.3"),
        (("::ffff:10.1.2.3", 7000, 0, 0), "10.1.2.3"),
        (("2001:db8:1:2:aaaa:bbbb:cccc:dddd", 7000, 0, 0), "2001:db8:1:2::/64"),
        (("fe80::1%eth0", 7000, 0, 2), "fe80::/64"),
        (None, "unknown"),
        (("not-an-address", 0), "not-an-address"),
    ],
)
def test_a_source_is_an_ipv4_address_or_an_ipv6_slash_64(peername: Any, key: str) -> None:
    assert source_key(peername) == key
