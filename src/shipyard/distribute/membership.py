"""Gossip membership: who is alive and which pieces each peer holds, with no coordinator.

Every peer keeps a record per member: a heartbeat (wall-clock milliseconds at its last tick, so a
restarted process outranks its previous life) and, per artifact, whether it wants all of it and
which pieces it holds. Peers exchange their views push-pull with a few random members each round;
a record with a higher heartbeat replaces the older one. A member whose heartbeat has not advanced
locally for `dead_after` seconds, or that refused a connection since, is treated as gone until
news of it arrives. So nobody dials a member that died and came back: it must speak first, to a
seed or to a member it remembers from its previous run (`remember`).

A restarted process whose clock went back would be taken for old news until its clock caught up.
So a peer that remembers a higher heartbeat for a member than the member is sending puts that
heartbeat in its reply, and a member that hears of a heartbeat of its own at or above its current
one beats above it from then on.

A view carries every live member's heartbeat and wants, but the piece bits of only the sender
and `haves_per_view` other members picked at random, so a gossip message grows by tens of bytes
per member rather than by a have-map per member. A record that arrives without bits keeps the
bits already known: pieces, once verified on a member's disk, stay there. Relay parents tell
their children of new pieces directly, and every piece request and reply carries both sides'
bits, so the scheduler does not depend on gossip for fresh piece news.

Gossip is believed only within bounds (a view's fields are checked in `messages` first): at most
`MAX_MEMBERS` records are kept, news of more is dropped until some are forgotten; a view names at
most `messages.VIEW_MEMBERS` members, a sample of them in a larger swarm; a heartbeat more than
`MAX_AHEAD_MS` past this host's clock is no clock's, and is ignored, of others and of itself.
"""

import base64
import contextlib
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from shipyard.distribute.messages import MAX_ARTIFACTS, VIEW_MEMBERS

FORGET_AFTER = 60.0
MAX_MEMBERS = 4 * VIEW_MEMBERS
MAX_AHEAD_MS = 24 * 3600 * 1000  # a day: more clock skew than any host keeps and still works


@dataclass(frozen=True)
class HaveMap:
    """Which of an artifact's pieces a member holds; `full` means it wants them all."""

    full: bool
    bits: int

    def has(self, index: int) -> bool:
        return (self.bits >> index) & 1 == 1


@dataclass(frozen=True)
class Record:
    heartbeat: int
    haves: dict[str, HaveMap]


def encode_bits(bits: int) -> str:
    """A have-map's bits as base64 of their little-endian bytes."""
    return base64.b64encode(bits.to_bytes((bits.bit_length() + 7) // 8, "little")).decode()


def decode_bits(text: Any) -> int:
    """The inverse of `encode_bits`; raises ValueError or TypeError when malformed."""
    return int.from_bytes(base64.b64decode(text, validate=True), "little")


def encode_record(record: Record, with_bits: bool = True) -> list[Any]:
    haves = {
        art: [h.full, encode_bits(h.bits) if with_bits else None] for art, h in record.haves.items()
    }
    return [record.heartbeat, haves]


def decode_record(raw: Any, previous: Record | None = None) -> Record:
    """A record from gossip; bits left out are taken from `previous`. Raises ValueError,
    TypeError, KeyError or AttributeError when malformed."""
    heartbeat, haves = raw
    known = previous.haves if previous else {}
    decoded = {}
    for art, (full, bits) in haves.items():
        held = known[art].bits if bits is None and art in known else decode_bits(bits or "")
        decoded[str(art)] = HaveMap(bool(full), held)
    return Record(int(heartbeat), decoded)


class Membership:
    """One peer's view of the swarm; not thread-safe (the daemon's event loop owns it)."""

    def __init__(
        self,
        me: str,
        seeds: Iterable[str],
        dead_after: float,
        clock: Callable[[], float] = time.monotonic,
        haves_per_view: int = 24,
        rng: random.Random | None = None,
        wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.me = me
        self.wall_ms = wall_ms
        self.haves_per_view = haves_per_view
        self._rng = rng or random.Random()
        self.seeds = [s for s in seeds if s != me]
        self.remembered: list[str] = []  # members a previous run of this daemon knew alive
        self.discovered: list[str] = []  # members lately posted on the members board
        self.dead_after = dead_after
        self.clock = clock
        self.records: dict[str, Record] = {}
        # Bumped whenever what is known of other members' pieces, or their standing, changes
        # (a new heartbeat alone does not), so readers can cache what they derive from it.
        self.version = 0
        # Each record as gossiped, with and without its bits, re-sent without re-encoding.
        self._encoded: dict[str, tuple[Any, Any]] = {}
        # Pieces members told this peer of directly, on piece requests and replies: fresher than
        # their gossiped records. Pieces are never unlearned (they stay on disk), so bits only
        # accumulate until the member is forgotten.
        self._direct: dict[str, dict[str, int]] = {}
        self._heard: dict[str, float] = {}
        self._failed: dict[str, float] = {}
        self._floor: dict[str, int] = {}  # highest heartbeat ever seen, so old news stays dead
        self._outrank = -1  # the highest heartbeat others hold for this peer

    def beat(self, haves: dict[str, HaveMap]) -> None:
        """Refresh this peer's own record with a new heartbeat and its current have-maps."""
        previous = self.records.get(self.me)
        latest = previous.heartbeat if previous else -1
        heartbeat = max(self.wall_ms(), latest + 1, self._outrank + 1)
        self.records[self.me] = Record(heartbeat, haves)
        self._encoded[self.me] = self._encodings(self.records[self.me])
        self._heard[self.me] = self.clock()

    def merge(self, view: dict[str, Any]) -> None:
        """Fold a gossiped view in; malformed entries are skipped, not trusted. Most entries
        repeat news already heard, so the heartbeat is compared before anything is decoded."""
        now = self.clock()
        latest = self.wall_ms() + MAX_AHEAD_MS
        for member, raw in view.items():
            if member == self.me:
                with contextlib.suppress(ValueError, TypeError, IndexError, KeyError):
                    if int(raw[0]) <= latest:
                        self._outrank = max(self._outrank, int(raw[0]))
                continue
            if not isinstance(member, str):
                continue
            if member not in self.records and len(self.records) >= MAX_MEMBERS:
                continue
            try:
                if not self._floor.get(member, -1) < int(raw[0]) <= latest:
                    continue
                previous = self.records.get(member)
                record = decode_record(raw, previous)
            except (ValueError, TypeError, KeyError, IndexError, AttributeError):
                continue
            if previous is None or previous.haves != record.haves or member in self._failed:
                self.version += 1
            self.records[member] = record
            self._encoded[member] = self._encodings(record)  # canonical, whatever was sent
            self._floor[member] = record.heartbeat
            self._heard[member] = now
            self._failed.pop(member, None)

    def note_have(self, member: str, artifact: str, encoded: Any) -> None:
        """Fold in a have-map `member` sent directly; a malformed one is ignored, and so is one
        from a member gossip has not brought yet (anyone can claim a name in a request)."""
        if member == self.me or encoded is None or member not in self.records:
            return
        try:
            bits = decode_bits(encoded)
        except (ValueError, TypeError):
            return
        known = self._direct.setdefault(member, {})
        if artifact not in known and len(known) >= MAX_ARTIFACTS:
            return
        merged = known.get(artifact, 0) | bits
        if merged != known.get(artifact):
            known[artifact] = merged
            self.version += 1

    def have_of(self, member: str, artifact: str) -> HaveMap | None:
        """What `member` holds of `artifact`, from gossip and direct news together."""
        record = self.records.get(member)
        gossiped = record.haves.get(artifact) if record else None
        direct = self._direct.get(member, {}).get(artifact)
        if gossiped is None and direct is None:
            return None
        full = gossiped.full if gossiped else False
        return HaveMap(full, (gossiped.bits if gossiped else 0) | (direct or 0))

    def wants_all(self, member: str, artifact: str) -> bool:
        record = self.records.get(member)
        have = record.haves.get(artifact) if record else None
        return have is not None and have.full

    def fail(self, member: str) -> None:
        """A direct connection to `member` failed: stop choosing it until it shows signs of life."""
        if member != self.me:
            self._failed[member] = self.clock()
            self.version += 1

    def is_alive(self, member: str) -> bool:
        if member == self.me:
            return True
        heard = self._heard.get(member)
        if heard is None or member in self._failed:
            return False
        return self.clock() - heard <= self.dead_after

    def alive(self) -> list[str]:
        """Live members other than this peer."""
        return [m for m in self.records if m != self.me and self.is_alive(m)]

    def view(self, to: str | None = None) -> dict[str, Any]:
        """What this peer gossips: its own record and those of members it believes alive, the
        piece bits only for itself and a random few. For `to`, the member being answered, when
        it is not among them: the highest heartbeat seen from it, which it must beat above."""
        self._forget()
        alive = self.alive()
        if len(alive) > VIEW_MEMBERS - 2:  # room for this peer and the one it answers
            alive = self._rng.sample(alive, VIEW_MEMBERS - 2)
        with_bits = set(self._rng.sample(alive, min(self.haves_per_view, len(alive))))
        with_bits.add(self.me)
        members = [self.me, *alive] if self.me in self._encoded else alive  # before the first beat
        view = {m: self._encoded[m][m not in with_bits] for m in members}
        if to is not None and to not in view and to in self._floor:
            view[to] = [self._floor[to], {}]
        return view

    @staticmethod
    def _encodings(record: Record) -> tuple[Any, Any]:
        return encode_record(record), encode_record(record, with_bits=False)

    def remember(self, members: Iterable[str]) -> None:
        """Members a previous run of this daemon knew alive (see `known_members`): dialled,
        besides the seeds, while this peer knows fewer live members than it gossips with."""
        self.remembered = [m for m in members if m != self.me and m not in self.seeds]

    def discover(self, members: Iterable[str]) -> None:
        """Members found on the members board (see `bootstrap`): dialled like remembered ones
        while this peer knows too few. The latest listing replaces the previous one."""
        self.discovered = [m for m in dict.fromkeys(members) if m != self.me]

    def gossip_targets(self, fanout: int, rng: random.Random) -> list[str]:
        """A few random live members, plus a seed while this peer knows too few of them, and as
        many remembered or discovered members as it lacks while it knows fewer than `fanout`."""
        alive = self.alive()
        targets = rng.sample(alive, min(fanout, len(alive)))
        unknown_seeds = [s for s in self.seeds if s not in targets and not self.is_alive(s)]
        if unknown_seeds and len(alive) < fanout + len(self.seeds):
            targets.append(rng.choice(unknown_seeds))
        if len(alive) < fanout:
            known = dict.fromkeys([*self.remembered, *self.discovered])
            unknown = [m for m in known if m not in targets and not self.is_alive(m)]
            targets += rng.sample(unknown, min(fanout - len(alive), len(unknown)))
        return targets

    def _forget(self) -> None:
        now = self.clock()
        for member in [m for m, t in self._heard.items() if now - t > FORGET_AFTER]:
            if member != self.me:
                self.records.pop(member, None)
                self._encoded.pop(member, None)
                self._direct.pop(member, None)
                self._heard.pop(member, None)
                self._failed.pop(member, None)
                self._floor.pop(member, None)  # none gossips it any more: its news is old
                self.version += 1
