"""A consistent-hash ring with bounded loads (Mirrokni, Thorup and Zadimoghaddam, 2018).

Each member owns `vnodes` points on a 64-bit circle. A key's members, in preference order, are
the distinct owners met walking clockwise from the key's hash; so when a member joins or leaves,
only the keys whose first eligible member changed move (about 1/n of them), and everything else
keeps its replica and its warm prefix cache.

Bounded load: with `total` things placed over `n` eligible members, a member may hold at most
`ceil((1 + epsilon) * (total + 1) / n)` of them, counting the one being placed (`load_cap`). The
router bounds two things with it: the prefix keys each replica owns (`keys.KeyTable`) and the
requests each holds in flight (`place`: a request whose member is full walks on to the next
member that is not). Ties cannot happen: points are ordered by (hash, member name), so every
router with the same membership makes the same choice. The cap is the caller's: it is taken
over the whole pool a request may go to, which can be wider than the members `place` is asked
to prefer.
"""

import bisect
import hashlib
import math
from collections.abc import Callable, Iterable, Iterator

DEFAULT_VNODES = 64


def hash64(data: bytes) -> int:
    """A stable 64-bit hash (the same on every host and Python run, unlike `hash`)."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def load_cap(total_in_flight: int, members: int, epsilon: float) -> int:
    """The most requests one of `members` may hold once one more is placed."""
    if members <= 0:
        return 0
    return math.ceil((1.0 + epsilon) * (total_in_flight + 1) / members)


class Ring:
    """An immutable ring over member names; build a new one when membership changes."""

    def __init__(self, members: Iterable[str], vnodes: int = DEFAULT_VNODES) -> None:
        self.members = tuple(sorted(set(members)))
        points = [
            (hash64(f"{name}#{i}".encode()), name) for name in self.members for i in range(vnodes)
        ]
        points.sort()
        self._hashes = [h for h, _ in points]
        self._owners = [name for _, name in points]

    def walk(self, key: bytes) -> Iterator[str]:
        """The members in preference order for `key`: each once, clockwise from its hash."""
        if not self._owners:
            return
        start = bisect.bisect_left(self._hashes, hash64(key))
        seen: set[str] = set()
        count = len(self._owners)
        for step in range(count):
            name = self._owners[(start + step) % count]
            if name not in seen:
                seen.add(name)
                yield name
                if len(seen) == len(self.members):
                    return

    def owner(self, key: bytes, eligible: Callable[[str], bool] = lambda _: True) -> str | None:
        """The first eligible member for `key` (None when none is)."""
        return next((name for name in self.walk(key) if eligible(name)), None)

    def place(
        self, key: bytes, load: Callable[[str], int], cap: int, eligible: Callable[[str], bool]
    ) -> tuple[str, int] | None:
        """The first eligible member for `key` holding fewer than `cap` requests, and its rank
        among the eligible members in the key's walk (0: the key's owner); None when all are full.
        """
        rank = 0
        for name in self.walk(key):
            if not eligible(name):
                continue
            if load(name) < cap:
                return name, rank
            rank += 1
        return None
