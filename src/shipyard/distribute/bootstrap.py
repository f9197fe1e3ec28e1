"""A second way in that needs no single address: a members board in object storage, and a loud
warning, with an origin budget, for a daemon that still finds nobody.

Seeds are a few fixed addresses, and a fresh host whose seeds are all down used to stay alone
for ever, quietly taking every piece from the origin. So each daemon given `--members-uri` also
posts its own address under `swarm/members/` in that store, one every host can reach (the
origin's bucket, which every host reads already, is the natural choice): one small object per
daemon, its key the address, renewed every quarter of `members_ttl`. It is not on by default
because it writes, and the origin is otherwise only read. A daemon that knows fewer live
members than it gossips with lists that prefix and dials the members posted within
`members_ttl`; an entry silent ten times that long is deleted by whoever lists it, so the
prefix stays the size of the live swarm.

Why this and not the alternatives: a DNS name with one A record per host needs someone to keep
that record current (an operator, or a service registry that is then the single address), and
multicast reaches only one L2 segment, which rules out most clouds. The origin's bucket is
already the one thing every host must reach, is itself replicated, and costs one LIST per
lonely daemon every few seconds. It needs write access to one prefix; a host that cannot write
there still finds others through what they posted.

A daemon that expects peers (it has seeds or a board) and knows no live member says so: a
warning on stderr after `ALONE_WARNING` seconds, `isolated` in `peer status`, the gauge
`shipyard_peer_isolated`; and while it is alone its fetches take at most
`isolated_origin_budget` bytes from the origin, then wait for peers (see `Holding`).
"""

import json
import random
import sys
import time
import urllib.parse
from collections.abc import Callable

from shipyard.distribute.config import DaemonConfig, parse_address
from shipyard.distribute.context import Context
from shipyard.errors import InvalidInput, ShipyardError
from shipyard.store import open_backend
from shipyard.store.backend import Backend

PREFIX = "swarm/members/"
KEEP = 32  # members dialled from one listing, chosen at random: enough to find the swarm
READ_EVERY = 2.0  # seconds between listings while lonely
EXPIRE_AFTER = 10  # TTLs after which an entry is deleted by whoever lists it
ALONE_WARNING = 5.0  # seconds alone before the warning (a fresh daemon needs a few rounds)


class MembersBoard:
    """This daemon's entry on the board, and the fresh entries of others."""

    def __init__(
        self,
        backend: Backend,
        me: str,
        ttl: float,
        rng: random.Random,
        wall: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backend = backend
        self.me = me
        self.ttl = ttl
        self.rng = rng
        self.wall = wall
        self.clock = clock
        self._posted = -float("inf")
        self._read = -float("inf")
        self._error: str | None = None

    def due(self, lonely: bool) -> bool:
        """Whether a `visit` has something to do now."""
        now = self.clock()
        return now - self._posted >= self.ttl / 4 or (lonely and now - self._read >= READ_EVERY)

    def visit(self, lonely: bool) -> list[str]:
        """Post this daemon's entry when due and, when `lonely`, list the board: the fresh
        members found (blocking: run it in a thread). A board that fails is named on stderr
        once per new error; the daemon carries on through its seeds."""
        now = self.clock()
        found: list[str] = []
        try:
            if now - self._posted >= self.ttl / 4:
                self._posted = now
                self.post()
            if lonely and now - self._read >= READ_EVERY:
                self._read = now
                found = self.read()
            self._error = None
        except (ShipyardError, OSError) as exc:
            if str(exc) != self._error:
                self._error = str(exc)
                print(f"peer {self.me}: members board: {exc}", file=sys.stderr, flush=True)
        return found

    def post(self) -> None:
        body = {"member": self.me, "at": round(self.wall(), 3)}
        self.backend.put(PREFIX + urllib.parse.quote(self.me, safe=":"), json.dumps(body).encode())

    def read(self) -> list[str]:
        """Up to `KEEP` members other than this one posted within the TTL, at random. The key
        names the member and the store's modification time dates it: one LIST, no GETs.
        Keys that are not HOST:PORT are skipped; entries long silent are deleted."""
        fresh = []
        now = self.wall()
        for info in self.backend.list(PREFIX):
            member = urllib.parse.unquote(info.key.removeprefix(PREFIX))
            age = now - info.mtime
            if age > EXPIRE_AFTER * self.ttl:
                self.backend.delete(info.key)
            elif age <= self.ttl and member != self.me and _is_address(member):
                fresh.append(member)
        return self.rng.sample(fresh, min(KEEP, len(fresh)))


def open_board(config: DaemonConfig, rng: random.Random) -> MembersBoard | None:
    uri = config.members_uri
    return MembersBoard(open_backend(uri), config.me, config.members_ttl, rng) if uri else None


def _is_address(text: str) -> bool:
    try:
        parse_address(text, "member")
    except InvalidInput:
        return False
    return True


class Isolation:
    """Whether a daemon that expects peers knows none alive: kept in `ctx.alone` (which holds
    its fetches to the origin budget), said on stderr and in the `shipyard_peer_isolated` gauge
    once it has lasted `ALONE_WARNING` seconds, and said again when peers are found."""

    def __init__(self, ctx: Context, expects_peers: bool, where: str) -> None:
        self.ctx = ctx
        self.expects_peers = expects_peers
        self.where = where  # how this daemon looks for members, for the warning
        self.since: float | None = None
        self.isolated = False
        ctx.metrics.set("shipyard_peer_isolated", 0)

    def update(self, live: int, now: float) -> None:
        """Fed the live members in good standing on every heartbeat."""
        ctx = self.ctx
        ctx.alone = self.expects_peers and live == 0
        if not ctx.alone:
            ctx.origin_bytes_alone = 0
            self.since = None
            if self.isolated:
                self.isolated = False
                ctx.metrics.set("shipyard_peer_isolated", 0)
                print(f"peer {ctx.config.me}: found {live} live members", flush=True)
            return
        if self.since is None:
            self.since = now
        if not self.isolated and now - self.since >= ALONE_WARNING:
            self.isolated = True
            ctx.metrics.set("shipyard_peer_isolated", 1)
            budget = ctx.config.isolated_origin_budget
            print(
                f"peer {ctx.config.me}: WARNING: no live member for {now - self.since:.0f} s "
                f"({self.where}); until one is found, fetches take at most {budget:,} bytes "
                "from the origin, then wait",
                file=sys.stderr,
                flush=True,
            )


def origin_budget_spent(ctx: Context) -> str | None:
    """Why the origin is not asked now, when this daemon is alone and has taken its budget from
    it meanwhile: it waits for peers rather than silently fetching everything from the origin.
    None while it may go on."""
    budget = ctx.config.isolated_origin_budget
    if not ctx.alone or ctx.origin_bytes_alone < budget:
        return None
    return (
        f"this daemon knows no live member, and took the {budget:,} bytes a daemon alone may "
        "take from the origin (--isolated-origin-mib): waiting for peers"
    )
