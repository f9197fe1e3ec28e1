"""Peer-to-peer artifact distribution with no coordinator: a daemon per host that gossips
membership and have-maps, swarms pieces rarest-first, verifies each against its SHA-256 before
storing or serving it, and caps origin fetches by rendezvous hashing.
"""

from shipyard.distribute.client import PullResult, pull
from shipyard.distribute.config import DaemonConfig, format_address, parse_address
from shipyard.distribute.daemon import PeerDaemon, run_daemon
from shipyard.distribute.tensors import select_pieces

__all__ = [
    "DaemonConfig",
    "PeerDaemon",
    "PullResult",
    "format_address",
    "parse_address",
    "pull",
    "run_daemon",
    "select_pieces",
]
