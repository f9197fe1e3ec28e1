"""The daemon's choice of TCP congestion control for the pieces it uploads."""

import socket

import pytest

from shipyard.distribute import DaemonConfig
from shipyard.distribute.server import use_congestion_control
from shipyard.errors import InvalidInput

from .conftest import Cluster


def _accepted_algorithm(name: str) -> tuple[str | None, bytes]:
    """Listen with `name` requested, accept one loopback connection; return what the kernel
    said and the algorithm the accepted (uploading) side runs."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        refused = use_congestion_control(listener, name)
        with socket.create_connection(listener.getsockname()), listener.accept()[0] as accepted:
            algorithm = accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16)
    return refused, algorithm.rstrip(b"\0")


def test_accepted_connections_inherit_the_listeners_algorithm() -> None:
    # Reno is built into every kernel and open to every user; cubic would not test inheritance
    # where it is also the system's default.
    assert _accepted_algorithm("reno") == (None, b"reno")


def test_an_unknown_algorithm_is_refused_with_the_kernels_reason() -> None:
    refused, algorithm = _accepted_algorithm("nosuchcc")
    assert refused is not None and "No such file" in refused
    assert algorithm != b"nosuchcc"


def test_config_refuses_a_name_the_kernel_could_not_hold() -> None:
    for bad in ("", "CUBIC", "cubic; rm", "a" * 16):
        with pytest.raises(InvalidInput, match="congestion control"):
            DaemonConfig(listen=("127.0.0.1", 1), store="/tmp/x", congestion_control=bad)
    assert DaemonConfig(listen=("127.0.0.1", 1), store="/tmp/x").congestion_control == "cubic"


def test_a_daemon_whose_algorithm_is_refused_says_so_and_still_serves(cluster: Cluster) -> None:
    peer = cluster.peer("a", [], "--congestion-control", "nosuchcc").start()
    assert peer.metrics()["shipyard_peer_blamed_peers"] == 0  # answers over its listener
    log = peer.log.read_text()
    assert "TCP congestion control 'nosuchcc' refused" in log
    assert "uploads use the kernel's default" in log
