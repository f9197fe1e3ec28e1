"""Peer-to-peer artifact distribution with no coordinator: a daemon per host that gossips
membership and have-maps, swarms pieces rarest-first, verifies each against its SHA-256 before
storing or serving it, and caps origin fetches by rendezvous hashing.

The names below load their module on first use: the daemon does not import the pull client, nor
`pull` the daemon, which keeps a restarting daemon's start-up CPU down.
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what type checkers see (`X as X`: re-exported)
    from shipyard.distribute.client import PullResult as PullResult
    from shipyard.distribute.client import pull as pull
    from shipyard.distribute.config import DaemonConfig as DaemonConfig
    from shipyard.distribute.config import format_address as format_address
    from shipyard.distribute.config import parse_address as parse_address
    from shipyard.distribute.daemon import PeerDaemon as PeerDaemon
    from shipyard.distribute.daemon import run_daemon as run_daemon
    from shipyard.distribute.tensors import select_pieces as select_pieces

_HOMES = {
    "DaemonConfig": "config",
    "format_address": "config",
    "parse_address": "config",
    "PeerDaemon": "daemon",
    "run_daemon": "daemon",
    "PullResult": "client",
    "pull": "client",
    "select_pieces": "tensors",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
