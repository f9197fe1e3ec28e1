"""Bounded loads on prefix keys: which replica each recently active prefix is assigned to.

A replica's prefix cache holds a few prefixes; what decides its hit rate is how many distinct
prefixes are sent to it, not how many requests. The ring alone splits a handful of keys
lumpily (8 keys on 2 replicas come out 6/2 or worse about 29% of the time, whatever the number
of points per replica), so one cache thrashes while the other idles. So bounded loads
(Mirrokni, Thorup and Zadimoghaddam) are applied to keys: with `K` distinct recently active
keys (the new one included) over `n` eligible replicas, a replica may own at most
`ceil((1 + epsilon) * K / n)` of them; a new key goes to the first replica in its ring walk
that owns fewer.

An assignment sticks while its replica stays eligible, so the cache that holds the prefix keeps
being hit; the table forgets a key idle for `ttl_s` (and the least recently used beyond
`max_keys`), so `K` counts only the working set. When a replica stops being eligible, only its
keys move, each on its next request, to the first replica in the key's walk under the cap.
When a replica joins the ring, the keys whose walk now starts at it move to it (up to the cap)
and no others: the consistent-hashing contract, per key. Everything is decided by the ring
order and the order in which keys arrive, so one router's choices are reproducible.
"""

import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Collection

from shipyard.serve.router.ring import Ring, load_cap

DEFAULT_KEY_TTL_S = 300.0
MAX_KEYS = 65536


class KeyTable:
    """The key → replica assignments of one pool (a deployment's version)."""

    def __init__(
        self,
        epsilon: float,
        ttl_s: float = DEFAULT_KEY_TTL_S,
        max_keys: int = MAX_KEYS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.epsilon = epsilon
        self.ttl_s = ttl_s
        self.max_keys = max(1, max_keys)
        self._clock = clock
        self._keys: OrderedDict[bytes, tuple[str, float]] = OrderedDict()  # oldest use first
        self._owned: Counter[str] = Counter()
        self._seen: set[str] = set()  # replicas whose share of the ring has been handed out

    def __len__(self) -> int:
        return len(self._keys)

    def owned(self, name: str) -> int:
        """How many live keys `name` is assigned."""
        return self._owned[name]

    def replica_of(self, key: bytes) -> str | None:
        entry = self._keys.get(key)
        return entry[0] if entry else None

    def assign(self, ring: Ring, eligible: Collection[str], key: bytes) -> str:
        """The replica `key` is assigned to, among the non-empty `eligible`; records the use."""
        now = self._clock()
        self._expire(now)
        self._admit(ring, eligible)
        entry = self._keys.get(key)
        if entry is not None and entry[0] in eligible:
            name = entry[0]
        else:
            if entry is not None:  # its replica left or is down: only this key moves
                self._drop(key)
                self._seen.discard(entry[0])  # so that a comeback takes its share back
            name = self._first_under_cap(ring, eligible, key, len(self._keys) + 1)
            self._owned[name] += 1
        self._keys[key] = (name, now)
        self._keys.move_to_end(key)
        while len(self._keys) > self.max_keys:
            self._drop(next(iter(self._keys)))
        return name

    def _cap(self, keys: int, members: int) -> int:
        return load_cap(keys - 1, members, self.epsilon)  # ceil((1 + eps) * keys / members)

    def _first_under_cap(self, ring: Ring, eligible: Collection[str], key: bytes, keys: int) -> str:
        cap = self._cap(keys, len(eligible))
        walk = [name for name in ring.walk(key) if name in eligible]
        walk += sorted(set(eligible) - set(walk))  # outside the ring: never so for a router
        # Fewer than n * cap keys are owned by eligible replicas, so one is under the cap.
        return next((n for n in walk if self._owned[n] < cap), walk[0])

    def _admit(self, ring: Ring, eligible: Collection[str]) -> None:
        """Hands a replica that joined the ring (or came back) the keys whose walk starts at it."""
        self._seen &= set(ring.members)
        joined = {n for n in eligible if n in ring.members and n not in self._seen}
        if not joined:
            return
        self._seen |= joined
        cap = self._cap(len(self._keys), len(eligible))
        for key, (name, used) in list(self._keys.items()):
            first = next((n for n in ring.walk(key) if n in eligible), None)
            if first in joined and first != name and self._owned[first] < cap:
                self._owned[name] -= 1
                self._owned[first] += 1
                self._keys[key] = (first, used)

    def _expire(self, now: float) -> None:
        while self._keys:
            key, (_, used) = next(iter(self._keys.items()))
            if now - used <= self.ttl_s:
                return
            self._drop(key)

    def _drop(self, key: bytes) -> None:
        name, _ = self._keys.pop(key)
        self._owned[name] -= 1
        if not self._owned[name]:
            del self._owned[name]
