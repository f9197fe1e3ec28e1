"""Piece choice when the relay tree does not decide it: rarest first among live holders.

Rarest-first keeps every piece replicated as evenly as possible, so the loss of any one host
removes no piece from the swarm and every uplink has something others want.
"""

import random
from collections.abc import Mapping, Sequence

import numpy as np

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
