"""One artifact on one peer: which of its pieces are held, wanted and in flight, and the loop
that fetches the missing ones: from its upstream peers in the mesh (see `relay`), a lane of
requests to each (two while catching up: see `catch_up`), rarest first; from any holder when no
upstream peer has a piece in time; or, for pieces it owns, from the origin.

A piece is stored only after its SHA-256 matches the manifest, and is served onward from that
moment (pipelining). Pieces already on disk at start are never fetched again (resume), and the
bytes of a piece whose transfer was cut short stay in its partial file, so that the next
transfer, from any holder, asks only for the rest (see `shipyard.store.partial`).
"""

import asyncio
import contextlib
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from shipyard.distribute.bootstrap import origin_budget_spent
from shipyard.distribute.catch_up import Pace, lane_for, pace, pieces_behind
from shipyard.distribute.claims import LOSER_GRACE, Claims
from shipyard.distribute.config import parse_address
from shipyard.distribute.context import Context
from shipyard.distribute.hedging import hedges
from shipyard.distribute.membership import HaveMap
from shipyard.distribute.news import HaveNews
from shipyard.distribute.origin_retries import OriginRetries
from shipyard.distribute.origin_stall import OriginStall
from shipyard.distribute.picker import (
    Availability,
    choose_peer,
    piece_indexes,
    rarest_first,
    upstream_picks,
)
from shipyard.distribute.piece_call import Aborted, PieceCall
from shipyard.distribute.relay import RelayPlan
from shipyard.distribute.sources import Sources
from shipyard.distribute.transfer import ORIGIN, LaneReset, PeerFault, Transfer, piece_request
from shipyard.distribute.wire import Header, PeerBusy, PeerGone
from shipyard.errors import IntegrityError, ShipyardError
from shipyard.store import Manifest
from shipyard.store.partial import PieceSink, SinkError, StalePartial
from shipyard.store.pieces import piece_key

TICK = 0.25
COALESCE = 0.05  # seconds between scheduling rounds at the busiest
BUSY_BACKOFF = 0.2  # seconds before asking a peer whose upload slots were full again
SETTLE_ROUNDS = 2  # gossip rounds for news of a new fetch to spread (see `_settle`)

T = TypeVar("T")


@dataclass
class Holding:
    artifact: str
    manifest: Manifest
    ctx: Context
    hashes: list[str] = field(init=False)
    sizes: dict[str, int] = field(init=False)
    held: int = 0
    wanted: set[int] = field(default_factory=set)
    full: bool = False
    bytes_from: dict[str, int] = field(default_factory=lambda: {"peer": 0, "origin": 0})
    sources: Sources = field(default_factory=Sources)  # pieces and bytes per peer and origin
    inflight: dict[int, list[Transfer]] = field(default_factory=dict)
    origin_after: float = 0.0
    presume_all_until: float = 0.0  # until then every live member counts as wanting it all
    on_done: Callable[["Holding"], None] | None = None  # called once every wanted piece is held
    store_error: str | None = None  # why this peer's store refused a piece: no fetch till a want
    _wanted_bits: int = 0
    _relay: tuple[tuple[str, ...], RelayPlan] | None = None
    _avail: tuple[tuple[int, int, int], Availability] | None = None
    # When each missing piece was first seen held somewhere (inf: not yet): relay patience's start.
    _seen_at: npt.NDArray[np.float64] = field(init=False)
    _claims: Claims = field(init=False)  # claims of peers that failed here (see `claims`)
    _budget_note: str | None = None  # why the origin waits: a lone daemon's budget is spent
    _news: HaveNews = field(init=False)
    _origin_retries: OriginRetries = field(default_factory=OriginRetries)
    _origin_stall: OriginStall = field(default_factory=OriginStall)
    _runner: "asyncio.Task[None] | None" = None
    _pace: Pace = field(init=False)  # how many requests to keep open (see `catch_up`)

    def __post_init__(self) -> None:
        self.sizes = {}
        for entry in self.manifest.files:
            for ref in entry.pieces:
                self.sizes.setdefault(ref.hash, ref.size)
        self.hashes = list(self.sizes)
        self._seen_at = np.full(len(self.hashes), np.inf)
        self._claims = Claims(self.ctx.blame, self.artifact, len(self.hashes))
        self._news = HaveNews(self.ctx, self.artifact, lambda: self.held)
        self._pace = pace(self.ctx.config, 0.0)

    # What this peer holds and wants

    def scan_disk(self) -> int:
        """Mark every piece already in the store as held (blocking: run it in a thread)."""
        for index, piece_hash in enumerate(self.hashes):
            if self.ctx.store.has_piece(piece_hash):
                self.held |= 1 << index
        return self.held.bit_count()

    def has(self, index: int) -> bool:
        return (self.held >> index) & 1 == 1

    def have_map(self) -> HaveMap:
        return HaveMap(self.full, self.held)

    def want(self, piece_hashes: list[str] | None) -> None:
        """Add pieces (all of them when None) to what this peer fetches, and start fetching."""
        if piece_hashes is None:
            self.full = True
            self.wanted = set(range(len(self.hashes)))
        else:
            index = {h: i for i, h in enumerate(self.hashes)}
            self.wanted |= {index[h] for h in piece_hashes if h in index}
        self._wanted_bits = sum(1 << i for i in self.wanted)
        self.store_error = None  # asked again: maybe room was made
        if self.missing() and (self._runner is None or self._runner.done()):
            self._settle()
            self._runner = asyncio.get_running_loop().create_task(self._run())
        self._update_gauges()

    def _settle(self) -> None:
        """When owners may start on the origin. They must agree on who owns what, and a peer
        hears who else wants the artifact only by gossip. A daemon up for a while knows the
        live members, and in a rollout all of them want it: it presumes so while the news
        spreads and starts at once. One just started waits for the news instead."""
        now = time.monotonic()
        settle = SETTLE_ROUNDS * self.ctx.config.gossip_interval
        if now - self.ctx.started >= settle:
            self.presume_all_until, self.origin_after = now + settle, now
        else:
            self.origin_after = now + settle

    async def stop(self) -> None:
        """Cancel the fetch loop and every transfer in flight (their pieces stay missing)."""
        tasks = [t.task for ts in self.inflight.values() for t in ts] + list(self._news.tasks)
        if self._runner:
            tasks.append(self._runner)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def missing(self) -> list[int]:
        return list(piece_indexes(self._wanted_bits & ~self.held, len(self.hashes)).tolist())

    def _unassigned(self) -> npt.NDArray[np.intp]:
        """Pieces wanted, not held and not in flight, in index order."""
        rest = self._wanted_bits & ~self.held
        for index in self.inflight:
            rest &= ~(1 << index)
        return piece_indexes(rest, len(self.hashes))

    def status(self) -> dict[str, object]:
        held = sum(self.sizes[self.hashes[i]] for i in self.wanted if self.has(i))
        return {
            "artifact": self.artifact,
            "wanted_bytes": sum(self.sizes[self.hashes[i]] for i in self.wanted),
            "held_bytes": held,
            "wanted_pieces": len(self.wanted),
            "missing_pieces": len(self.missing()),
            "bytes_from_peers": self.bytes_from["peer"],
            "bytes_from_origin": self.bytes_from["origin"],
            "sources": self.sources.report(),
            "store_error": self.store_error,
            "origin_error": self._origin_retries.last_error or self._budget_note,
        }

    # The fetch loop

    async def _run(self) -> None:
        while self._wanted_bits & ~self.held and self.store_error is None:
            # Cleared before scheduling, so news arriving while this round runs or pauses
            # starts the next round at once instead of waiting for a later event or the tick.
            self.ctx.changed.clear()
            self._schedule()
            # Events come in bursts (transfers ending, children told of pieces): a short pause
            # lets one round of scheduling answer a whole burst.
            await asyncio.sleep(COALESCE)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(TICK):
                    await self.ctx.changed.wait()
        if self.on_done and self.store_error is None:
            self.on_done(self)

    def _availability(self) -> Availability:
        """Who holds what, rebuilt only when that news changed, or (for members that fell
        silent) once per tick."""
        key = (self.ctx.membership.version, self.ctx.blame.version, int(time.monotonic() / TICK))
        if self._avail is None or self._avail[0] != key:
            self._avail = (key, self._build_availability())
        return self._avail[1]

    def _build_availability(self) -> Availability:
        """Live members' claims, less those of blamed members and those disbelieved here."""
        haves = {}
        blame = self.ctx.blame
        for member in self.ctx.membership.alive():
            have = self.ctx.membership.have_of(member, self.artifact)
            if have is not None and member not in blame:
                bits = have.bits & ~blame.retracted(member, self.artifact)
                haves[member] = HaveMap(have.full, bits)
        return Availability(haves, len(self.hashes))

    def _schedule(self) -> None:
        """One round: ask each upstream peer for the rarest piece it holds, any holder for
        what is overdue, the origin for owned pieces nobody holds. The work over every missing
        piece is done with arrays: Python loops only over the few requests a round can make."""
        now = time.monotonic()
        self._claims.cut_trickles(self.inflight, now)
        avail = self._availability()
        plan = self._plan(avail)
        behind = pieces_behind(avail, self.ctx.membership.me, self.held.bit_count())
        self._pace = pace(self.ctx.config, behind if self.full else 0.0)
        todo = self._unassigned()
        free = self._free_peers(avail, now)
        # The pace's requests open to each upstream peer, pipelined on its lane, for the rarest
        # pieces it holds: one pick per peer per pass.
        for _ in range(self._pace.per_peer):
            upstream = [p for p in plan.upstream if p in free]
            self.ctx.rng.shuffle(upstream)  # no peer always gets first pick of the rarest
            for index, upstream_peer in upstream_picks(todo, avail, upstream, self.ctx.array_rng):
                self._ask(index, upstream_peer, free)
            todo = todo[~np.isin(todo, list(self.inflight))]
        # Pieces no upstream peer has passed on in time: rarest first, from any holder.
        held_somewhere = avail.counts[todo] > 0
        unseen = held_somewhere & np.isinf(self._seen_at[todo])
        self._seen_at[todo[unseen]] = now
        late = now - self._seen_at[todo] > self.ctx.config.relay_patience
        overdue = todo[held_somewhere & late]
        if free and len(overdue):
            overdue = overdue[avail.held_by_any(sorted(free), overdue)]
        for index in rarest_first(overdue, avail.counts, self.ctx.array_rng):
            if not free:
                break  # nobody left to ask: the rest of the pieces wait for the next round
            who = [p for p in avail.holders(index) if p in free]
            peer = choose_peer(who, self.ctx.load, self._pace.per_peer, self.ctx.rng)
            if peer is not None:
                self._ask(index, peer, free)
        self._fetch_owned_from_origin(todo, avail, plan)
        self._hedge(avail, endgame=not len(todo))

    def _ask(self, index: int, peer: str, free: set[str]) -> None:
        """Request the piece of `peer`, keeping `free` to the peers that can take another
        request (empty once this peer has no request left to make)."""
        if self._open_requests() >= self._pace.total:
            free.clear()
            return
        self._start(index, peer)
        if self.ctx.load[peer] >= self._pace.per_peer:
            free.discard(peer)

    def _free_peers(self, avail: Availability, now: float) -> set[str]:
        """Members this peer may send another request to right now."""
        limit = self._pace.per_peer
        members = self.ctx.choosable(avail.members, now)
        return {m for m in members if self.ctx.load.get(m, 0) < limit}

    def _fetch_owned_from_origin(
        self, todo: npt.NDArray[np.intp], avail: Availability, plan: RelayPlan
    ) -> None:
        """Pieces no live peer holds come from the origin, only through their owners (or
        backups: see `RelayPlan.origin_picks`)."""
        free = self.ctx.config.origin_inflight - self.ctx.load.get(ORIGIN, 0)
        now = time.monotonic()
        if self.ctx.origin is None or now < self.origin_after or free <= 0:
            return
        self._budget_note = origin_budget_spent(self.ctx)
        if self._budget_note:
            return
        nowhere = self._claims.nowhere(avail.counts)
        nowhere[piece_indexes(self.held, len(self.hashes))] = False
        nowhere[self._origin_retries.waiting(now)] = False  # the origin failed them lately
        stalled = self._origin_stall.stalled(int(nowhere.sum()), now)
        for index in plan.origin_picks(todo, nowhere, stalled)[:free]:  # `todo`: none in flight
            self._start(index, ORIGIN)

    def _plan(self, avail: Availability) -> RelayPlan:
        """The mesh and origin owners over the live members that want the whole artifact, and
        this peer; rebuilt only when that set changes."""
        membership = self.ctx.membership
        wanting = [m for m in avail.members if membership.wants_all(m, self.artifact)]
        if time.monotonic() < self.presume_all_until:
            wanting += [m for m in membership.alive() if m not in self.ctx.blame]
        members = tuple(sorted({*wanting, membership.me}))
        if self._relay is None or self._relay[0] != members:
            cfg = self.ctx.config
            shape = (cfg.mesh_degree, cfg.origin_replicas, cfg.origin_gateways)
            plan = RelayPlan(self.hashes, members, membership.me, *shape)
            self._relay = (members, plan)
        return self._relay[1]

    def _hedge(self, avail: Availability, endgame: bool) -> None:
        # Within the steady number of requests: not a second share for a peer catching up (its
        # second lanes are that), nor beyond its pace for one yielding.
        budget = min(self.ctx.config.max_inflight, self._pace.total) - self._open_requests()
        for index, peer in hedges(self.inflight, avail, self.ctx, budget, endgame):
            self.ctx.metrics.inc("shipyard_peer_hedged_requests_total")
            self._start(index, peer)

    def _open_requests(self) -> int:
        return sum(len(t) for t in self.inflight.values())

    def _start(self, index: int, source: str) -> None:
        self.ctx.load[source] = self.ctx.load.get(source, 0) + 1
        call = None if source == ORIGIN else PieceCall(self.ctx.config.min_transfer_rate)
        lanes = [t.lane for ts in self.inflight.values() for t in ts if t.source == source]
        lane = lane_for(lanes, self._pace.lanes) if call else 0  # the origin has no lanes
        task = asyncio.get_running_loop().create_task(self._transfer(index, source, call, lane))
        transfer = Transfer(source, time.monotonic(), call, task, lane)
        self.inflight.setdefault(index, []).append(transfer)

    async def _transfer(self, index: int, source: str, call: PieceCall | None, lane: int) -> None:
        requested = time.monotonic()
        received = 0
        try:
            received, kept = await self._download(index, source, call, lane)
        except SinkError as exc:  # this peer's own disk, not the sender's fault
            self._store_failed(str(exc))
            return
        except StalePartial as exc:
            # Bytes kept from earlier transfers spoilt the piece: it starts over, and whoever
            # wrote them is blamed, when this run knows who did.
            self.ctx.metrics.inc("shipyard_peer_partial_pieces_discarded_total")
            writers = self.ctx.partial_sources.take(self.hashes[index])
            if writers is not None:
                self._claims.corrupt(index, writers | {source}, str(exc))
            return
        except IntegrityError as exc:
            self.ctx.metrics.inc("shipyard_peer_pieces_corrupt_total")
            if source == ORIGIN:
                self._origin_retries.failed(index, f"origin: {exc}", time.monotonic())
            else:
                self._claims.corrupt(index, {source}, str(exc))
            return
        except (LaneReset, Aborted):
            return  # lost with an earlier request, or called off here: asked again later
        except PeerBusy:
            self.ctx.avoid(source, BUSY_BACKOFF)
            self.ctx.metrics.inc("shipyard_peer_request_failures_total", source="busy")
            return
        except PeerFault as exc:
            self.ctx.peer_failed(source, gone=False)
            self._claims.failed(index, source, exc.reason, str(exc))
            return
        except (ShipyardError, OSError) as exc:
            if source == ORIGIN:
                self.ctx.metrics.inc("shipyard_peer_request_failures_total", source="origin")
                self._origin_retries.failed(index, str(exc), time.monotonic())
            else:
                self.ctx.peer_failed(source, gone=isinstance(exc, PeerGone))
            return
        finally:
            self.ctx.blame.received(source, call.received() if call else received)
            self.ctx.load[source] -= 1
            self._forget(index, source)
            self.ctx.changed.set()
        if not self._stored(index, source, received):
            return
        if kept:
            self.ctx.metrics.inc("shipyard_peer_partial_bytes_resumed_total", kept)
        if self.ctx.trace:
            first_byte = call.active_since if call else None
            self.ctx.trace.record(self.artifact, index, source, lane, requested, first_byte)

    async def _download(
        self, index: int, source: str, call: PieceCall | None, lane_index: int
    ) -> tuple[int, int]:
        """Fetch the piece into its sink and store it, on a transfer thread (a slow disk must
        not stall the event loop); return how many bytes came, and how many were kept from a
        transfer cut short."""
        piece_hash = self.hashes[index]
        size, stored = self.sizes[piece_hash], partial(self.has, index)
        receive = partial(self.ctx.partials.receive, piece_hash, size, held=stored)
        if call is None:
            origin = self.ctx.origin
            assert origin is not None
            return await self._blocking(receive, partial(origin.read_into, piece_key(piece_hash)))
        relay = self._relay is not None and source in self._relay[1].upstream
        me, held = self.ctx.membership.me, self.held
        lane = self.ctx.lanes(parse_address(source), lane_index)
        replies: list[Header] = []

        def fetch(sink: PieceSink) -> None:
            header = piece_request(piece_hash, self.artifact, me, held, relay, sink.kept)
            replies.append(lane.fetch(call, header, sink))

        guarded = self.ctx.partial_sources.guard(piece_hash, source, fetch)
        try:
            counts = await self._blocking(receive, guarded)
        except asyncio.CancelledError:
            call.abort()  # the worker thread is blocked on the socket: end its receive now
            raise
        if replies:
            self.ctx.membership.note_have(source, self.artifact, replies[0].get("have"))
        return counts

    async def _blocking(self, fn: Callable[..., T], *args: object) -> T:
        """Run `fn` on the daemon's transfer threads."""
        return await asyncio.get_running_loop().run_in_executor(self.ctx.transfers, fn, *args)

    def _forget(self, index: int, source: str) -> None:
        transfers = [t for t in self.inflight.get(index, []) if t.source != source]
        if transfers and not self.has(index):
            self.inflight[index] = transfers
        else:
            self.inflight.pop(index, None)

    def _stored(self, index: int, source: str, nbytes: int) -> bool:
        """Mark the piece held and tell whom it concerns; False if a twin stored it first."""
        if self.has(index):
            return False  # count its bytes once
        now = time.monotonic()
        for twin in self.inflight.pop(index, []):
            # Outrun by this copy: a trickle all the same, or it would escape every time.
            self._claims.trickled(index, twin, now, LOSER_GRACE)
            twin.task.cancel()
        self.held |= 1 << index
        self._seen_at[index] = np.inf
        if self.ctx.partial_sources.take(self.hashes[index]) != set():
            # Bytes a called-off transfer left behind (or an earlier run did): a twin whose
            # bytes were in memory stored the piece, so nobody else removes them.
            self.ctx.partials.discard(self.hashes[index])
        self._origin_retries.held(index)
        if self._relay is not None:
            self._news.tell(self._relay[1].downstream)
        kind = "origin" if source == ORIGIN else "peer"
        self.ctx.blame.delivered(source)  # the origin's pieces show this host receives too
        if source == ORIGIN and self.ctx.alone:
            self.ctx.origin_bytes_alone += nbytes
        self.bytes_from[kind] += nbytes
        self.sources.add(source, nbytes)
        self.ctx.metrics.inc("shipyard_peer_bytes_received_total", nbytes, source=kind)
        self.ctx.metrics.inc("shipyard_peer_pieces_received_total", source=kind)
        self._update_gauges()
        return True

    def _store_failed(self, reason: str) -> None:
        self.ctx.metrics.inc("shipyard_peer_store_failures_total")
        if self.store_error is None:
            self.store_error = reason
            me = self.ctx.membership.me
            print(f"peer {me}: fetch stopped: {reason}", file=sys.stderr, flush=True)

    def _update_gauges(self) -> None:
        held = (self._wanted_bits & self.held).bit_count()
        self.ctx.metrics.set("shipyard_peer_artifact_pieces_held", held, artifact=self.artifact)
        self.ctx.metrics.set(
            "shipyard_peer_artifact_pieces_wanted", len(self.wanted), artifact=self.artifact
        )
