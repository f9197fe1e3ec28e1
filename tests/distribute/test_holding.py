"""When a new fetch may start on the origin, and over which members it plans who owns what."""

import asyncio
import random
import time
from pathlib import Path

import numpy as np

from shipyard.distribute.config import DaemonConfig
from shipyard.distribute.context import Context
from shipyard.distribute.holding import Holding
from shipyard.distribute.membership import HaveMap, Membership
from shipyard.distribute.origin import BackendOrigin
from shipyard.distribute.relay import BACKUP_KEEP
from shipyard.store import LocalBackend, Manifest, PieceStore, put_tree

PIECE = 64 << 10
PIECES = 8
OTHERS = ["10.0.0.2:7000", "10.0.0.3:7000", "10.0.0.4:7000"]


def _artifact(tmp_path: Path, pieces: int = PIECES) -> Manifest:
    src = tmp_path / "src"
    src.mkdir()
    (src / "blob.bin").write_bytes(random.Random(7).randbytes(pieces * PIECE))
    return put_tree(PieceStore(LocalBackend(tmp_path / "origin")), src, "model", PIECE)


def _context(
    tmp_path: Path,
    up_for: float,
    fetching: Manifest | None = None,
    others_hold: int = 0,
    catch_up_lag: int = 3,
) -> Context:
    """A daemon that has heard from three live members, which have asked for nothing, or for
    the whole of `fetching` holding the pieces in the bits `others_hold` (the daemon then has
    an origin)."""
    # The others never beat again: they must not be taken for dead while a test runs.
    store = str(tmp_path / "store")
    config = DaemonConfig(("10.0.0.1", 7000), store, dead_after=60.0, catch_up_lag=catch_up_lag)
    membership = Membership(config.me, [], config.dead_after)
    for other in OTHERS:
        peer = Membership(other, [], config.dead_after)
        peer.beat({fetching.id: HaveMap(True, others_hold)} if fetching else {})
        membership.merge(peer.view())
    store = PieceStore(LocalBackend(tmp_path / "store"))
    origin = BackendOrigin(LocalBackend(tmp_path / "origin")) if fetching else None
    return Context(config, store, membership, origin, started=time.monotonic() - up_for)


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


async def _fetch_while_others_stall(tmp_path: Path, pieces: int) -> tuple[Holding, list[int]]:
    """A whole-artifact fetch by a daemon whose three fellow owners never fetch anything; run
    until it stops getting pieces. Returns it and the pieces it was expected to get."""
    manifest = _artifact(tmp_path, pieces)
    ctx = _context(tmp_path, up_for=60.0, fetching=manifest)
    holding = Holding(manifest.id, manifest, ctx)
    holding.want(None)
    plan = holding._plan(holding._availability())
    expected = set(plan.owned)
    me = int(plan.first_owner[min(plan.owned)])  # this daemon's index among the members
    for owner in {int(o) for o in plan.first_owner} - {me}:
        stalled = np.flatnonzero(plan.first_owner == owner).tolist()
        expected |= {i for i in stalled[BACKUP_KEEP:] if plan.backed_mask[i]}
    try:
        held, still = -1, 0
        while still < 10:  # a second without a new piece
            await asyncio.sleep(0.1)
            still = still + 1 if holding.held == held else 0
            held = holding.held
        return holding, sorted(expected)
    finally:
        await holding.stop()
        ctx.close()


def test_an_owner_done_with_its_own_pieces_backs_up_stalled_owners(tmp_path: Path) -> None:
    holding, expected = asyncio.run(_fetch_while_others_stall(tmp_path, pieces=32))
    fetched = [i for i in range(32) if holding.has(i)]
    assert fetched == expected
    assert len(expected) > 32 // (len(OTHERS) + 1)  # its own eight, and some it backs up
    assert holding.bytes_from["origin"] == len(expected) * PIECE


async def _first_requests(
    tmp_path: Path, catch_up_lag: int, pieces: int = 32, others_hold: int = 0, held: int = 0
) -> dict[str, list[int]]:
    """The lane of each request a daemon fetching a whole artifact opens in its first round, by
    peer, when its three fellow members hold the pieces in the bits `others_hold` (default: all)
    and it holds those in `held`."""
    manifest = _artifact(tmp_path, pieces=pieces)
    others_hold = others_hold or (1 << pieces) - 1
    ctx = _context(tmp_path, 60.0, manifest, others_hold=others_hold, catch_up_lag=catch_up_lag)
    holding = Holding(manifest.id, manifest, ctx)
    holding.held = held
    holding.want(None)
    try:
        holding._schedule()  # the fetch loop has not run yet: this is its first round
        lanes: dict[str, list[int]] = {}
        for transfers in holding.inflight.values():
            for transfer in transfers:
                lanes.setdefault(transfer.source, []).append(transfer.lane)
        return lanes
    finally:
        await holding.stop()
        ctx.close()


def test_a_peer_behind_the_others_opens_twice_the_requests_on_two_lanes(tmp_path: Path) -> None:
    lanes = asyncio.run(_first_requests(tmp_path, catch_up_lag=3))  # 32 pieces behind
    config = DaemonConfig(("10.0.0.1", 7000), str(tmp_path))
    assert set(lanes) == set(OTHERS)  # its upstream peers in a ring of four
    each = config.per_peer_inflight
    for peer_lanes in lanes.values():  # each lane pipelined as deep as a peer level has its one
        assert sorted(peer_lanes) == [0] * each + [1] * each


def test_a_peer_level_with_the_others_keeps_one_lane_each(tmp_path: Path) -> None:
    lanes = asyncio.run(_first_requests(tmp_path, catch_up_lag=33))  # 32 behind: not enough
    config = DaemonConfig(("10.0.0.1", 7000), str(tmp_path))
    assert set(lanes) == set(OTHERS)
    for peer_lanes in lanes.values():
        assert peer_lanes == [0] * config.per_peer_inflight


def test_a_peer_ahead_of_the_others_keeps_one_request_fewer_on_each_lane(tmp_path: Path) -> None:
    # The others hold pieces 0-39; this peer all but 32-39, 16 pieces ahead of them. Its eight
    # missing pieces would fill the lanes three, three and two deep: yielding, two each.
    ahead = ((1 << 64) - 1) & ~(0xFF << 32)
    lanes = asyncio.run(
        _first_requests(tmp_path, catch_up_lag=3, pieces=64, others_hold=(1 << 40) - 1, held=ahead)
    )
    config = DaemonConfig(("10.0.0.1", 7000), str(tmp_path))
    assert set(lanes) == set(OTHERS)
    for peer_lanes in lanes.values():
        assert peer_lanes == [0] * (config.per_peer_inflight - 1)
