"""When a new fetch may start on the origin, and over which members it plans who owns what."""

import asyncio
import os
import time
from pathlib import Path

from shipyard.distribute.config import DaemonConfig
from shipyard.distribute.context import Context
from shipyard.distribute.holding import Holding
from shipyard.distribute.membership import Membership
from shipyard.store import LocalBackend, Manifest, PieceStore, put_tree

PIECE = 64 << 10
PIECES = 8
OTHERS = ["10.0.0.2:7000", "10.0.0.3:7000", "10.0.0.4:7000"]


def _artifact(tmp_path: Path) -> Manifest:
    src = tmp_path / "src"
    src.mkdir()
    (src / "blob.bin").write_bytes(os.urandom(PIECES * PIECE))
    return put_tree(PieceStore(LocalBackend(tmp_path / "origin")), src, "model", PIECE)


def _context(tmp_path: Path, up_for: float) -> Context:
    """A daemon that has heard from three live members, none of which has asked for anything."""
    config = DaemonConfig(listen=("10.0.0.1", 7000), store=str(tmp_path / "store"))
    membership = Membership(config.me, [], config.dead_after)
    for other in OTHERS:
        peer = Membership(other, [], config.dead_after)
        peer.beat({})
        membership.merge(peer.view())
    store = PieceStore(LocalBackend(tmp_path / "store"))
    return Context(config, store, membership, None, started=time.monotonic() - up_for)


async def _start_fetch(tmp_path: Path, up_for: float) -> tuple[Holding, set[int], float]:
    """Start a whole-artifact fetch; return it, the pieces it owns, and its origin delay."""
    manifest = _artifact(tmp_path)
    ctx = _context(tmp_path, up_for)
    holding = Holding(manifest.id, manifest, ctx)
    holding.want(None)
    try:
        owned = holding._plan(holding._availability()).owned
        return holding, owned, holding.origin_after - time.monotonic()
    finally:
        await holding.stop()
        ctx.close()


def test_a_daemon_up_a_while_starts_on_the_origin_at_once_presuming_all_members_want_it(
    tmp_path: Path,
) -> None:
    _, owned, delay = asyncio.run(_start_fetch(tmp_path, up_for=60.0))
    assert delay <= 0
    # Planned over itself and the three members it knows, not over itself alone.
    assert len(owned) == PIECES // (len(OTHERS) + 1)


def test_a_just_started_daemon_waits_for_gossip_before_the_origin(tmp_path: Path) -> None:
    holding, owned, delay = asyncio.run(_start_fetch(tmp_path, up_for=0.0))
    assert delay > 0
    # Nobody has said it wants the artifact yet, so this peer owns every piece, which is why
    # it must not touch the origin until the news has had time to arrive.
    assert len(owned) == PIECES
    assert holding.presume_all_until == 0.0
