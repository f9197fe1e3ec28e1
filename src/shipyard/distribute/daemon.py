"""The peer daemon: one per host. It gossips membership and have-maps, serves what it holds and
fetches what it is asked for, with no tracker or scheduler anywhere.
"""

import asyncio
import base64
import contextlib
import os
import secrets
import signal
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from shipyard.distribute.bootstrap import Isolation, open_board
from shipyard.distribute.config import DaemonConfig, format_address, parse_address
from shipyard.distribute.context import Context
from shipyard.distribute.holding import Holding
from shipyard.distribute.known_members import KnownMembers
from shipyard.distribute.materialize import Materializations
from shipyard.distribute.membership import Membership, encode_bits
from shipyard.distribute.messages import check_view
from shipyard.distribute.origin import open_origin
from shipyard.distribute.server import Server, use_congestion_control
from shipyard.distribute.swarm_key import SwarmKey
from shipyard.distribute.trace import TransferTrace
from shipyard.distribute.wants import Wanted, WantLog
from shipyard.distribute.wire import Header, PeerGone, PeerUnavailable, request
from shipyard.errors import IntegrityError, InvalidInput, NotFound, ShipyardError
from shipyard.store import LocalBackend, Manifest, PieceStore, open_backend
from shipyard.store.backend import Backend
from shipyard.store.pieces import manifest_key
from shipyard.trust.signatures import parse_signatures, read_signatures, signatures_key

MANIFEST_PATIENCE = 15.0  # how long a fetch waits for some peer or the origin to have a manifest
SIGNATURE_HOLDERS_ASKED = 3  # an unsigned artifact costs a fetch this many requests at most


def open_store(uri: str, fsync: bool) -> PieceStore:
    parsed = urlparse(uri)
    backend: Backend
    if parsed.scheme in ("", "file"):
        backend = LocalBackend(Path(unquote(parsed.path) if parsed.scheme else uri), fsync=fsync)
    else:
        backend = open_backend(uri)
    return PieceStore(backend)


class PeerDaemon:
    def __init__(self, config: DaemonConfig) -> None:
        seeds = [format_address(s) for s in config.seeds]
        self.ctx = Context(
            config=config,
            store=open_store(config.store, config.fsync),
            membership=Membership(
                config.me, seeds, config.dead_after, haves_per_view=config.gossip_haves
            ),
            origin=open_origin(config.origin) if config.origin else None,
            trace=TransferTrace(config.trace, config.me) if config.trace else None,
            key=SwarmKey.load(Path(config.swarm_key_file)) if config.swarm_key_file else None,
        )
        self.holdings: dict[str, Holding] = {}
        self.materializations = Materializations(self.ctx)  # files written for local pulls
        self.wants = WantLog(self.ctx.store.backend)
        self.known_members = KnownMembers(self.ctx.store.backend, self.ctx.rng)
        # The second way in besides the seeds, and the watch for finding nobody (`bootstrap`).
        self.board = open_board(config, self.ctx.rng)
        where = f"seeds: {', '.join(seeds) or 'none'}; members board: {config.members_uri}"
        expects_peers = bool(self.ctx.membership.seeds) or self.board is not None  # not itself
        self.isolation = Isolation(self.ctx, expects_peers, where)
        self._board_visit: asyncio.Task[None] | None = None
        self._wants_written = asyncio.Lock()  # records written in the order of the news
        self._writes: set[asyncio.Task[None]] = set()  # store writes under way
        # Sent with fetch and status replies: a client that sees it change knows the daemon
        # restarted since it asked, and has forgotten what it was asked to fetch.
        self.boot = secrets.token_hex(8)
        self._pending: dict[str, asyncio.Task[Holding]] = {}
        self._server: asyncio.Server | None = None
        self._handler: Server | None = None
        self._gossiper: asyncio.Task[None] | None = None
        self._exchanges: dict[str, asyncio.Task[None]] = {}  # gossip still open, per member

    async def start(self) -> None:
        """Adopt every complete or partial artifact in the store, listen, start gossiping, and
        carry on with the fetches a previous run of this daemon had not finished."""
        for artifact in await asyncio.to_thread(lambda: list(self.ctx.store.manifest_ids())):
            with contextlib.suppress(ShipyardError):
                manifest = await asyncio.to_thread(self.ctx.store.get_manifest, artifact)
                await self._adopt(artifact, manifest)
        # Partial pieces resume only while their piece is missing from an artifact held here.
        unheld = {
            piece_hash
            for holding in self.holdings.values()
            for index, piece_hash in enumerate(holding.hashes)
            if not holding.has(index)
        }
        await asyncio.to_thread(self.ctx.partials.sweep, unheld)
        ops = {
            "gossip": self._on_gossip,
            "have": self._on_have,
            "fetch": self._on_fetch,
            "status": self._on_status,
        }
        local = {"materialize": self._on_materialize}
        self._handler = Server(self.ctx, ops, self._held, local)
        listen = self.ctx.config.listen
        try:
            self._server = await asyncio.start_server(self._handler.handle, *listen)
        except OSError as exc:  # the port taken (another daemon?) or an address not on this host
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            raise InvalidInput(f"cannot listen on {format_address(listen)}: {reason}") from None
        self._choose_congestion_control(self._server)
        if remembered := await asyncio.to_thread(self.known_members.load):
            self.ctx.membership.remember(remembered)
            me = self.ctx.config.me
            print(f"peer {me}: remembering {len(remembered)} members of its last run", flush=True)
        self.ctx.membership.beat(self._haves())
        self._gossiper = asyncio.get_running_loop().create_task(self._gossip_loop())
        await self._resume_wants()

    async def _resume_wants(self) -> None:
        for artifact, pieces in (await asyncio.to_thread(self.wants.pending)).items():
            holding = self.holdings.get(artifact)
            if holding is None:  # its manifest was removed from the store: so is the want
                await asyncio.to_thread(self.wants.clear, artifact)
                continue
            self._want(holding, pieces)  # its record is already on disk, as it should stay
            if missing := len(holding.missing()):
                me = self.ctx.config.me
                print(f"peer {me}: resuming {artifact[:12]}, {missing} pieces to go", flush=True)

    def _choose_congestion_control(self, server: asyncio.Server) -> None:
        name = self.ctx.config.congestion_control
        if name is None:
            return
        for listener in server.sockets:
            refused = use_congestion_control(listener, name)
            if refused:
                print(
                    f"peer {self.ctx.config.me}: TCP congestion control {name!r} refused "
                    f"({refused}); uploads use the kernel's default",
                    file=sys.stderr,
                    flush=True,
                )
                return

    async def stop(self) -> None:
        """Stop gossiping, fetching and serving; close every connection."""
        if self._gossiper:
            self._gossiper.cancel()
        if self._board_visit:
            self._board_visit.cancel()
        for exchange in list(self._exchanges.values()):
            exchange.cancel()
        await self.materializations.stop()
        for holding in self.holdings.values():
            await holding.stop()
        if self._server:
            self._server.close()
        if self._handler:
            await self._handler.close()
        self.ctx.close()

    # Artifacts

    async def _adopt(self, artifact: str, manifest: Manifest) -> Holding:
        holding = Holding(artifact, manifest, self.ctx, on_done=self._note_wants)
        held = await asyncio.to_thread(holding.scan_disk)
        holding.full = held == len(holding.hashes)
        self.ctx.metrics.inc("shipyard_peer_pieces_resumed_total", held)
        self.holdings[artifact] = holding
        return holding

    async def holding(self, artifact: str) -> Holding:
        """The artifact's holding, fetching its manifest first if this peer has never seen it."""
        if artifact in self.holdings:
            return self.holdings[artifact]
        task = self._pending.get(artifact)
        if task is None or task.done():  # concurrent callers share one manifest fetch
            task = asyncio.get_running_loop().create_task(self._obtain(artifact))
            self._pending[artifact] = task
        return await asyncio.shield(task)

    async def _obtain(self, artifact: str) -> Holding:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + MANIFEST_PATIENCE
        while True:
            data = await self._manifest_from_peers(artifact) or await self._manifest_from_origin(
                artifact
            )
            if data is not None:
                manifest = self.ctx.store.parse_manifest(artifact, data)
                await asyncio.to_thread(self.ctx.store.put_manifest, manifest)
                return await self._adopt(artifact, manifest)
            if loop.time() > deadline:
                raise NotFound(f"artifact {artifact}: no peer or origin has its manifest")
            await asyncio.sleep(self.ctx.config.gossip_interval)

    async def _manifest_from_peers(self, artifact: str) -> bytes | None:
        cfg = self.ctx.config
        members = self.ctx.membership
        holders = [m for m in members.alive() if artifact in members.records[m].haves]
        self.ctx.rng.shuffle(holders)
        for member in holders:
            if member in self.ctx.blame:
                continue
            try:
                _, body = await request(
                    parse_address(member),
                    {"op": "manifest", "id": artifact},
                    cfg.connect_timeout,
                    cfg.idle_timeout,
                    self.ctx.pool,
                    self.ctx.key,
                )
            except PeerUnavailable:
                continue
            if body is not None and _matches(artifact, body):
                return body
            # It claimed the artifact and sent other bytes.
            self.ctx.blame.lose_standing(member, "corrupt", f"manifest of {artifact}: wrong bytes")
        return None

    async def _manifest_from_origin(self, artifact: str) -> bytes | None:
        if self.ctx.origin is None:
            return None
        try:
            data = await asyncio.to_thread(self.ctx.origin.get, manifest_key(artifact))
        except (ShipyardError, OSError):
            return None
        if not _matches(artifact, data):
            raise IntegrityError(f"manifest of {artifact}: origin bytes do not match the id")
        return data

    async def _signatures(self, artifact: str) -> bytes | None:
        """The artifact's signature file: the store's, else the first a few holders or the
        origin have that parses and signs only this artifact, kept for the next reader. Whether
        its signatures verify, and by whom, is each reader's trust policy to say."""
        backend = self.ctx.store.backend
        if (stored := await asyncio.to_thread(read_signatures, backend, artifact)) is not None:
            return stored
        members = self.ctx.membership
        holders = [
            m
            for m in members.alive()
            if artifact in members.records[m].haves and m not in self.ctx.blame
        ]
        self.ctx.rng.shuffle(holders)
        for member in holders[:SIGNATURE_HOLDERS_ASKED]:
            try:
                _, body = await request(
                    parse_address(member),
                    {"op": "signatures", "id": artifact},
                    self.ctx.config.connect_timeout,
                    self.ctx.config.idle_timeout,
                    self.ctx.pool,
                    self.ctx.key,
                )
            except PeerUnavailable:  # an error reply too: that holder has none
                continue
            if body and _signs_only(artifact, body):
                await asyncio.to_thread(backend.put, signatures_key(artifact), body)
                return body
        if self.ctx.origin is not None:
            with contextlib.suppress(ShipyardError, OSError):
                data = await asyncio.to_thread(self.ctx.origin.get, signatures_key(artifact))
                if _signs_only(artifact, data):
                    await asyncio.to_thread(backend.put, signatures_key(artifact), data)
                    return data
        return None

    # Requests

    async def _on_fetch(self, header: Header) -> dict[str, Any]:
        artifact = _artifact_id(header.get("artifact"))
        pieces = header.get("pieces")
        if pieces is not None and not isinstance(pieces, list):
            raise InvalidInput("fetch: 'pieces' must be a list of piece hashes or null")
        holding = await self.holding(artifact)
        # What was held and where it came from before this fetch: what the pull reports is the
        # difference (see `sources`).
        before = {"held": encode_bits(holding.held), "sources": holding.sources.report()}
        self._want(holding, pieces)
        await self._write_wants(holding)  # before the reply: an acknowledged fetch is resumed
        body = holding.manifest.canonical_bytes()
        reply: dict[str, Any] = {"ok": True, "boot": self.boot, "body": body} | before
        if header.get("signatures") is True:
            found = await self._signatures(artifact)
            reply["signatures"] = None if found is None else base64.b64encode(found).decode()
        return reply

    def _want(self, holding: Holding, pieces: Wanted) -> None:
        """Want `pieces` (None: all) too, and start fetching them."""
        holding.want(pieces)
        if self.ctx.origin is not None and holding.missing():  # origin requests follow soon
            self.ctx.transfers.submit(self.ctx.origin.warm)

    def _note_wants(self, holding: Holding) -> None:
        self._write_in_background(self._write_wants(holding))

    def _write_in_background(self, write: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(write)
        self._writes.add(task)  # the loop keeps only a weak reference
        task.add_done_callback(self._writes.discard)

    async def _write_wants(self, holding: Holding) -> None:
        """Record what `holding` still wants, or clear its record once nothing is missing.
        Written one at a time, each from the state at its turn, so the last word is current.
        A record that cannot be written costs only the resume: the fetch goes on."""
        async with self._wants_written:
            try:
                if holding.missing():
                    wanted = None if holding.full else [holding.hashes[i] for i in holding.wanted]
                    await asyncio.to_thread(self.wants.record, holding.artifact, wanted)
                else:
                    await asyncio.to_thread(self.wants.clear, holding.artifact)
            except (ShipyardError, OSError) as exc:
                print(f"peer {self.ctx.config.me}: want record: {exc}", file=sys.stderr, flush=True)

    async def _on_status(self, header: Header) -> dict[str, Any]:
        if header.get("artifact") is None:  # the whole daemon: every artifact it holds
            return {
                "me": self.ctx.config.me,
                "members_alive": len(self.ctx.membership.alive()),
                "isolated": self.isolation.isolated,
                "blamed": self.ctx.blame.report(),
                "holdings": [holding.status() for holding in self.holdings.values()],
                "boot": self.boot,
            }
        artifact = _artifact_id(header.get("artifact"))
        if artifact not in self.holdings:
            raise NotFound(f"artifact {artifact} is not held or being fetched here")
        return self.holdings[artifact].status() | {"boot": self.boot}

    async def _on_materialize(self, header: Header, uid: int | None) -> dict[str, Any]:
        """Write an artifact held or being fetched here into a directory, for a client on this
        host running as user `uid` (see `materialize`); the reply carries its status too."""
        holding = self.holdings.get(header["artifact"])
        if holding is None:
            raise NotFound(f"artifact {header['artifact']} is not held or being fetched here")
        reply = await self.materializations.ask(holding, header, uid)
        return holding.status() | reply | {"boot": self.boot}

    async def _on_have(self, header: Header) -> dict[str, Any]:
        """A peer stored a piece (this one is downstream of it in the mesh): schedule at once."""
        member, artifact = header.get("from"), header.get("artifact")
        if isinstance(member, str) and isinstance(artifact, str):
            self.ctx.membership.note_have(member, artifact, header.get("have"))
            self.ctx.changed.set()
        return {"ok": True}

    async def _on_gossip(self, header: Header) -> dict[str, Any]:
        """A gossip request, its fields already checked (`messages.check_request`)."""
        self._merge(header["view"])
        return {"view": self.ctx.membership.view(to=header.get("from"))}

    # Gossip

    def _held(self, artifact: str) -> int | None:
        holding = self.holdings.get(artifact)
        return holding.held if holding else None

    def _haves(self) -> dict[str, Any]:
        return {art: h.have_map() for art, h in self.holdings.items()}

    async def _gossip_loop(self) -> None:
        """Beat and gossip on schedule. Exchanges run on their own, so one slow peer (a full
        queue on its link) cannot hold the heartbeat back until others think this peer dead."""
        cfg = self.ctx.config
        loop = asyncio.get_running_loop()
        while True:
            self.ctx.membership.beat(self._haves())
            self._look_for_members()
            if members := self.known_members.to_save(self.ctx.membership.alive(), time.monotonic()):
                self._write_in_background(self._save_known_members(members))
            for target in self.ctx.membership.gossip_targets(cfg.gossip_fanout, self.ctx.rng):
                if target not in self._exchanges:  # at most one exchange open per member
                    self._exchanges[target] = loop.create_task(self._gossip_with(target))
            await asyncio.sleep(cfg.gossip_interval * self.ctx.rng.uniform(0.8, 1.2))

    def _look_for_members(self) -> None:
        """Note whether this daemon is alone, and visit the members board when due: to post
        its address, and while it knows too few members to find more (`bootstrap`)."""
        membership = self.ctx.membership
        live = [m for m in membership.alive() if m not in self.ctx.blame]
        self.isolation.update(len(live), time.monotonic())
        lonely = len(live) < self.ctx.config.gossip_fanout
        board = self.board
        if board is None or not board.due(lonely):
            return
        if self._board_visit is None or self._board_visit.done():

            async def visit() -> None:
                if found := await asyncio.to_thread(board.visit, lonely):
                    membership.discover(found)

            self._board_visit = asyncio.get_running_loop().create_task(visit())

    async def _save_known_members(self, members: list[str]) -> None:
        try:
            await asyncio.to_thread(self.known_members.save, members)
        except (ShipyardError, OSError) as exc:  # costs only a quick rejoin after a restart
            print(f"peer {self.ctx.config.me}: known members: {exc}", file=sys.stderr, flush=True)

    async def _gossip_with(self, member: str) -> None:
        try:
            await self._exchange_views(member)
        finally:
            self._exchanges.pop(member, None)

    async def _exchange_views(self, member: str) -> None:
        cfg = self.ctx.config
        try:
            reply, _ = await request(
                parse_address(member),
                {"op": "gossip", "from": self.ctx.config.me, "view": self.ctx.membership.view()},
                cfg.connect_timeout,
                cfg.idle_timeout,
                self.ctx.pool,
                self.ctx.key,
            )
            view = check_view(reply.get("view"), f"gossip reply from {member}: view")
        except PeerGone:
            self.ctx.membership.fail(member)
            return
        except (PeerUnavailable, InvalidInput):
            return  # maybe a busy link: the member's heartbeat tells whether it lives
        self._merge(view)

    def _merge(self, view: dict[str, Any]) -> None:
        """Fold a gossiped view in. A fetch with nothing in flight (a daemon just restarted, which
        knew only its seeds) schedules at once on news of holders, not on its next tick."""
        version = self.ctx.membership.version
        self.ctx.membership.merge(view)
        if self.ctx.membership.version != version and any(
            not h.inflight and h.missing() for h in self.holdings.values()
        ):
            self.ctx.changed.set()


def _matches(artifact: str, data: bytes) -> bool:
    try:
        PieceStore.parse_manifest(artifact, data)
    except (IntegrityError, InvalidInput):
        return False
    return True


def _signs_only(artifact: str, data: bytes) -> bool:
    """Whether `data` is a signature file whose every signature names `artifact`."""
    try:
        signatures = parse_signatures(data, f"signatures of {artifact}")
    except InvalidInput:
        return False
    return all(signature.artifact == artifact for signature in signatures)


def _artifact_id(value: object) -> str:
    if (
        not isinstance(value, str)
        or len(value) != 64
        or not all(c in "0123456789abcdef" for c in value)
    ):
        raise InvalidInput(f"artifact {value!r} is not a full artifact id (64 hex digits)")
    return value


def run_daemon(config: DaemonConfig, ready: Callable[[], None] | None = None) -> None:
    """Serve until SIGINT or SIGTERM; `ready()` is called once the daemon is listening."""

    async def main() -> None:
        daemon = PeerDaemon(config)
        await daemon.start()
        if ready:
            ready()
        stopped = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stopped.set)
        await stopped.wait()
        await daemon.stop()

    asyncio.run(main())
