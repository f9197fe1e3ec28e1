"""Piece choice: rarest-first among live holders, and rendezvous owners for origin fetches.

Rarest-first keeps every piece replicated as evenly as possible, so the loss of any one host
removes no piece from the swarm and every uplink has something others want. Rendezvous hashing
gives each piece the same owner(s) on every peer that shares a membership view, without talking:
only owners may fetch that piece from the origin, which bounds origin bytes to about one copy.
"""

import hashlib
import random
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from shipyard.distribute.membership import HaveMap


def rendezvous_order(piece_hash: str, members: Iterable[str]) -> list[str]:
    """Members by descending hash of (member, piece): the same order on every peer that knows
    the same members, and one that only loses its place for a member that leaves."""

    def score(member: str) -> bytes:
        return hashlib.blake2b(f"{member}|{piece_hash}".encode(), digest_size=8).digest()

    return sorted(members, key=score, reverse=True)


def rendezvous_owners(piece_hash: str, members: Iterable[str], count: int) -> list[str]:
    """The `count` members first in the piece's rendezvous order; stable under churn."""
    return rendezvous_order(piece_hash, members)[:count]


class RelayPlan:
    """Each piece's relay tree over the members that want the whole artifact.

    The members in the piece's rendezvous order form a `fanout`-ary heap: the first `owners`
    fetch it from the origin and the member at position i gets it from position (i - 1) //
    fanout. Every peer derives the same trees without talking, each member is an inner node in
    about 1/fanout of them, so the upload work of a fan-out is spread evenly over all uplinks
    instead of falling on whichever hosts happen to be ahead.
    """

    def __init__(
        self, hashes: Sequence[str], members: Sequence[str], me: str, fanout: int, owners: int
    ) -> None:
        self.parents: list[str | None] = []
        self.children: list[list[str]] = []
        self.owned: set[int] = set()
        ring = sorted(members, key=lambda m: hashlib.blake2b(m.encode(), digest_size=8).digest())
        for index, piece_hash in enumerate(hashes):
            roots = rendezvous_order(piece_hash, members)[:owners]
            rest = [m for m in ring if m not in roots]
            turn = index % max(1, len(rest))
            order = [*roots, *rest[turn:], *rest[:turn]]
            rank = order.index(me)
            if rank < owners:
                self.owned.add(index)
            self.parents.append(order[(rank - 1) // fanout] if rank else None)
            self.children.append(order[rank * fanout + 1 : rank * fanout + fanout + 1])


class Availability:
    """Which live peers hold which pieces, as a members × pieces matrix built once per round."""

    def __init__(self, haves: Mapping[str, HaveMap], pieces: int) -> None:
        self.members = list(haves)
        width, mask = (pieces + 7) // 8, (1 << pieces) - 1  # gossip may carry stray high bits
        packed = b"".join((haves[m].bits & mask).to_bytes(width, "little") for m in self.members)
        rows = np.frombuffer(packed, dtype=np.uint8).reshape(len(self.members), width)
        self.matrix = np.unpackbits(rows, axis=1, count=pieces, bitorder="little").astype(bool)
        self.counts = self.matrix.sum(axis=0)
        self._rows = {m: i for i, m in enumerate(self.members)}

    def holders(self, index: int) -> list[str]:
        return [self.members[j] for j in np.flatnonzero(self.matrix[:, index])]

    def holds(self, member: str, index: int) -> bool:
        row = self._rows.get(member)
        return row is not None and bool(self.matrix[row, index])


def rarest_first(wanted: Sequence[int], counts: np.ndarray, rng: random.Random) -> list[int]:
    """Wanted pieces some peer holds, fewest holders first, ties in random order."""
    indices = np.asarray(wanted, dtype=np.int64)
    indices = indices[counts[indices] > 0] if len(indices) else indices
    ties = np.array([rng.random() for _ in range(len(indices))])
    return [int(i) for i in indices[np.lexsort((ties, counts[indices]))]]


def choose_peer(
    candidates: Sequence[str], load: Mapping[str, int], limit: int, rng: random.Random
) -> str | None:
    """A random one of the least-loaded candidates under `limit` open requests. Random, not
    fastest: every requester sees the same rates, and picking by them would herd them all onto
    the same few uplinks."""
    open_ = [c for c in candidates if load.get(c, 0) < limit]
    if not open_:
        return None
    least = min(load.get(c, 0) for c in open_)
    return rng.choice([c for c in open_ if load.get(c, 0) == least])
