"""Piece choice: the rarest piece each upstream peer can send, and rarest first among live holders.

Rarest-first keeps every piece replicated as evenly as possible, so the loss of any one host
removes no piece from the swarm and every uplink has something others want.
"""

import functools
import random
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from shipyard.distribute.membership import HaveMap


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

    @functools.cached_property
    def member_counts(self) -> npt.NDArray[np.intp]:
        """Pieces each member holds, in `members` order: summed once per view, not per round."""
        counts: npt.NDArray[np.intp] = self.matrix.sum(axis=1)
        return counts

    def holders(self, index: int) -> list[str]:
        return [self.members[j] for j in np.flatnonzero(self.matrix[:, index])]

    def row(self, member: str) -> int:
        """`member`'s row, or -1 when it is not a live holder."""
        return self._rows.get(member, -1)

    def held_by_any(
        self, members: Sequence[str], pieces: npt.NDArray[np.intp]
    ) -> npt.NDArray[np.bool_]:
        """Per piece, whether any of `members` holds it."""
        rows = np.array([self._rows[m] for m in members if m in self._rows], dtype=np.intp)
        held: npt.NDArray[np.bool_] = np.any(self.matrix[np.ix_(rows, pieces)], axis=0)
        return held


def piece_indexes(bits: int, count: int) -> npt.NDArray[np.intp]:
    """The set bits of a have-map below `count`, as piece indexes in order."""
    packed = np.frombuffer(bits.to_bytes((count + 7) // 8, "little"), dtype=np.uint8)
    return np.flatnonzero(np.unpackbits(packed, count=count, bitorder="little"))


def rarest_first(
    wanted: Sequence[int] | npt.NDArray[np.intp], counts: np.ndarray, rng: np.random.Generator
) -> list[int]:
    """Wanted pieces some peer holds, fewest holders first, ties in random order."""
    indices = np.asarray(wanted, dtype=np.int64)
    indices = indices[counts[indices] > 0] if len(indices) else indices
    ties = rng.random(len(indices))
    order: list[int] = indices[np.lexsort((ties, counts[indices]))].tolist()
    return order


def upstream_picks(
    todo: npt.NDArray[np.intp],
    avail: Availability,
    upstream: Sequence[str],
    rng: np.random.Generator,
) -> list[tuple[int, str]]:
    """One (piece, peer) request per upstream peer, in the order given: the rarest piece of
    `todo` that the peer holds and no earlier pick took."""
    taken = np.zeros(len(avail.counts), dtype=bool)
    picks = []
    for peer in upstream:
        row = avail.row(peer)
        if row < 0:
            continue
        offered = rarest_first(todo[avail.matrix[row, todo] & ~taken[todo]], avail.counts, rng)
        if offered:
            taken[offered[0]] = True
            picks.append((offered[0], peer))
    return picks


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
