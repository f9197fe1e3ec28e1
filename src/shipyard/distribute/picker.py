"""Piece choice: rarest-first among live holders, and rendezvous owners for origin fetches.

Rarest-first keeps every piece replicated as evenly as possible, so the loss of any one host
removes no piece from the swarm and every uplink has something others want. Rendezvous hashing
gives each piece the same owner(s) on every peer that shares a membership view, without talking:
only owners may fetch that piece from the origin, which bounds origin bytes to about one copy.
"""

import hashlib
import random
from collections.abc import Iterable, Mapping, Sequence

from shipyard.distribute.membership import HaveMap


def rendezvous_owners(piece_hash: str, members: Iterable[str], count: int) -> list[str]:
    """The `count` members with the highest hash of (member, piece); stable under churn."""

    def score(member: str) -> bytes:
        return hashlib.blake2b(f"{member}|{piece_hash}".encode(), digest_size=8).digest()

    return sorted(members, key=score, reverse=True)[:count]


def holders(index: int, haves: Mapping[str, HaveMap]) -> list[str]:
    return [member for member, have in haves.items() if have.has(index)]


def rarest_first(
    wanted: Iterable[int], haves: Mapping[str, HaveMap], rng: random.Random
) -> list[tuple[int, list[str]]]:
    """Wanted pieces some peer holds, fewest holders first, ties in random order."""
    ranked = []
    for index in wanted:
        who = holders(index, haves)
        if who:
            ranked.append((len(who), rng.random(), index, who))
    ranked.sort()
    return [(index, who) for _, _, index, who in ranked]


def choose_peer(
    candidates: Sequence[str],
    load: Mapping[str, int],
    rate: Mapping[str, float],
    limit: int,
) -> str | None:
    """The least-loaded candidate under `limit` requests, the fastest one among equals."""
    open_ = [c for c in candidates if load.get(c, 0) < limit]
    if not open_:
        return None
    return min(open_, key=lambda c: (load.get(c, 0), -rate.get(c, 0.0)))
