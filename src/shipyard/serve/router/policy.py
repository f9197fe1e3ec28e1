"""Routing policies: given the replicas a request may go to, pick one (filter → score → pick).

The caller filters (healthy replicas of the chosen version that serve the requested model or
adapter); a policy scores and picks among them:

- `prefix` (Shipyard's): a request's session sticks to the replica that served it last, unless
  that replica is at the in-flight cap; otherwise the request goes to the replica its prefix key
  is assigned to (`keys.KeyTable`: bounded loads on keys, `epsilon`), preferring a replica whose
  /health lists the adapter as resident. It is sent elsewhere only when that replica already
  holds `ceil((1 + spill_epsilon) * (in_flight + 1) / replicas)` requests: a cold prefill on
  another replica costs several warm requests' time and evicts that replica's own prefixes, so
  the in-flight slack is wider than the key slack. A spill does not move the key.
- `round_robin` and `least_loaded`: the baselines, behind the same interface. Least-loaded
  breaks ties by rotation, never at random (identical scores must not scatter a prefix, Dynamo
  #3581, nor pile onto the first replica).
"""

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from shipyard.errors import InvalidInput
from shipyard.serve.router.keys import DEFAULT_KEY_TTL_S, KeyTable
from shipyard.serve.router.ring import Ring, load_cap

POLICIES = ("prefix", "round_robin", "least_loaded")
MAX_SESSIONS = 65536
# The least in-flight slack for spills: an owner may hold twice the mean before a request is
# sent to a cold cache (on 2 replicas, ceil(2 * (T + 1) / 2) = T + 1: never).
MIN_SPILL_EPSILON = 1.0


class Load(Protocol):
    """What a policy sees of a replica."""

    @property
    def in_flight(self) -> int: ...

    @property
    def adapters_loaded(self) -> frozenset[str]: ...


@dataclass(frozen=True)
class Route:
    """What a policy is asked to place: the ring key, and what affinity applies."""

    pool: str  # deployment/version: sessions and rotations are kept per pool
    key: bytes
    adapter: str | None = None
    session: str | None = None


@dataclass(frozen=True)
class Choice:
    name: str
    outcome: str  # owner | spilled | session | adapter | round_robin | least_loaded


class Policy(Protocol):
    name: str

    def choose(self, ring: Ring, eligible: Mapping[str, Load], route: Route) -> Choice | None:
        """One of `eligible` (None when it is empty)."""
        ...


class PrefixPolicy:
    name = "prefix"

    def __init__(
        self,
        epsilon: float,
        spill_epsilon: float | None = None,
        key_ttl_s: float = DEFAULT_KEY_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.epsilon = epsilon
        self.spill_epsilon = (
            max(epsilon, MIN_SPILL_EPSILON) if spill_epsilon is None else spill_epsilon
        )
        self._key_ttl_s = key_ttl_s
        self._clock = clock
        self._keys: dict[str, KeyTable] = {}
        self._sessions: OrderedDict[tuple[str, str], str] = OrderedDict()

    def keys(self, pool: str) -> KeyTable:
        """The key assignments of `pool` (a deployment/version)."""
        table = self._keys.get(pool)
        if table is None:
            table = self._keys[pool] = KeyTable(self.epsilon, self._key_ttl_s, clock=self._clock)
        return table

    def choose(self, ring: Ring, eligible: Mapping[str, Load], route: Route) -> Choice | None:
        if not eligible:
            return None
        total = sum(r.in_flight for r in eligible.values())
        cap = load_cap(total, len(eligible), self.spill_epsilon)
        choice = self._sticky(eligible, route, cap) or self._hashed(ring, eligible, route, cap)
        if route.session is not None:
            self._sessions[(route.pool, route.session)] = choice.name
            self._sessions.move_to_end((route.pool, route.session))
            while len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)
        return choice

    def _sticky(self, eligible: Mapping[str, Load], route: Route, cap: int) -> Choice | None:
        if route.session is None:
            return None
        name = self._sessions.get((route.pool, route.session))
        if name is not None and name in eligible and eligible[name].in_flight < cap:
            return Choice(name, "session")
        return None

    def _hashed(self, ring: Ring, eligible: Mapping[str, Load], route: Route, cap: int) -> Choice:
        home = self.keys(route.pool).assign(ring, eligible, route.key)
        adapter = route.adapter
        free = eligible[home].in_flight < cap
        if free and (adapter is None or adapter in eligible[home].adapters_loaded):
            return Choice(home, "owner")

        def load(name: str) -> int:
            return eligible[name].in_flight

        if adapter is not None:
            placed = ring.place(
                route.key,
                load,
                cap,
                lambda n: n in eligible and n != home and adapter in eligible[n].adapters_loaded,
            )
            if placed is not None:
                return Choice(placed[0], "adapter")
        if free:
            return Choice(home, "owner")
        placed = ring.place(route.key, load, cap, lambda n: n in eligible and n != home)
        # The cap is above the mean load, so some replica other than the full one is under it.
        assert placed is not None, "bounded load: every eligible replica is over the cap"
        return Choice(placed[0], "spilled")


class _Rotation:
    """A turn counter per pool: the baselines' deterministic order, never a random pick."""

    def __init__(self) -> None:
        self._next: dict[str, int] = {}

    def _turn(self, pool: str) -> int:
        turn = self._next.get(pool, 0)
        self._next[pool] = turn + 1
        return turn


class RoundRobinPolicy(_Rotation):
    name = "round_robin"

    def choose(self, ring: Ring, eligible: Mapping[str, Load], route: Route) -> Choice | None:
        if not eligible:
            return None
        names = sorted(eligible)
        return Choice(names[self._turn(route.pool) % len(names)], self.name)


class LeastLoadedPolicy(_Rotation):
    name = "least_loaded"

    def choose(self, ring: Ring, eligible: Mapping[str, Load], route: Route) -> Choice | None:
        if not eligible:
            return None
        names = sorted(eligible)
        turn = self._turn(route.pool)
        # Among the least loaded, the first at or after this request's turn in the rotation.
        best = min(
            range(len(names)),
            key=lambda i: (eligible[names[i]].in_flight, (i - turn) % len(names)),
        )
        return Choice(names[best], self.name)


def make_policy(name: str, epsilon: float) -> Policy:
    """The policy called `name`; InvalidInput names the allowed values."""
    if not epsilon >= 0:
        raise InvalidInput(f"epsilon: expected a number >= 0, got {epsilon}")
    if name == "prefix":
        return PrefixPolicy(epsilon)
    if name == "round_robin":
        return RoundRobinPolicy()
    if name == "least_loaded":
        return LeastLoadedPolicy()
    raise InvalidInput(f"policy: expected one of {', '.join(POLICIES)}, got {name!r}")
