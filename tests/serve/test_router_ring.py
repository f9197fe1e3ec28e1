"""The ring and the policies: consistency under membership changes, bounded load, affinity."""

from dataclasses import dataclass

from hypothesis import assume, given
from hypothesis import strategies as st

from shipyard.serve.router.keys import KeyTable
from shipyard.serve.router.policy import (
    LeastLoadedPolicy,
    PrefixPolicy,
    RoundRobinPolicy,
    Route,
)
from shipyard.serve.router.ring import Ring, load_cap

names = st.text(alphabet="abcdefghr0123456789-", min_size=1, max_size=8)


@dataclass
class Rep:
    in_flight: int = 0
    adapters_loaded: frozenset[str] = frozenset()


@given(
    members=st.sets(names, min_size=1, max_size=12),
    changed=names,
    keys=st.lists(st.binary(max_size=40), min_size=1, max_size=100),
)
def test_a_membership_change_moves_only_the_changed_members_keys(
    members: set[str], changed: str, keys: list[bytes]
) -> None:
    after_members = members ^ {changed}  # `changed` joins, or leaves
    assume(after_members)
    before, after = Ring(members), Ring(after_members)
    for key in keys:
        old, new = before.owner(key), after.owner(key)
        if old != new:
            assert changed in (old, new)


@given(
    members=st.sets(names, min_size=2, max_size=12),
    keys=st.lists(st.binary(max_size=40), min_size=1, max_size=100),
    data=st.data(),
)
def test_a_member_out_of_rotation_is_the_same_as_a_member_removed(
    members: set[str], keys: list[bytes], data: st.DataObject
) -> None:
    down = data.draw(st.sampled_from(sorted(members)))
    ring, smaller = Ring(members), Ring(members - {down})
    for key in keys:
        assert ring.owner(key, lambda n: n != down) == smaller.owner(key)


def test_about_one_nth_of_the_keys_move_when_one_of_n_leaves() -> None:
    members = [f"replica-{i}" for i in range(10)]
    keys = [f"tenant-{i}".encode() for i in range(5000)]
    before, after = Ring(members), Ring(members[1:])
    moved = sum(before.owner(k) != after.owner(k) for k in keys)
    owned = sum(before.owner(k) == "replica-0" for k in keys)
    assert moved == owned
    assert 0.05 < moved / len(keys) < 0.16
    shares = [sum(before.owner(k) == m for k in keys) / len(keys) for m in members]
    assert max(shares) < 0.2 and min(shares) > 0.04  # 64 points each keep the shares level


def test_the_walk_is_the_same_whatever_order_members_are_given_in() -> None:
    members = ["b", "a", "c", "d"]
    key = b"system prompt"
    assert list(Ring(members).walk(key)) == list(Ring(reversed(members)).walk(key))
    assert sorted(Ring(members).walk(key)) == sorted(members)


def _place(policy: PrefixPolicy, ring: Ring, reps: dict[str, Rep], route: Route) -> str:
    choice = policy.choose(ring, reps, route)
    assert choice is not None
    reps[choice.name].in_flight += 1
    return choice.name


@given(
    replicas=st.integers(min_value=1, max_value=8),
    epsilon=st.sampled_from([0.0, 0.1, 0.25, 1.0]),
    arrivals=st.integers(min_value=1, max_value=200),
)
def test_a_hot_prefix_never_puts_a_replica_over_the_bound(
    replicas: int, epsilon: float, arrivals: int
) -> None:
    reps = {f"r{i}": Rep() for i in range(replicas)}
    ring, policy = Ring(reps), PrefixPolicy(epsilon, spill_epsilon=epsilon)
    hot = Route("d/v1", b"the one system prompt everyone shares")
    for _ in range(arrivals):
        _place(policy, ring, reps, hot)
        total = sum(r.in_flight for r in reps.values())
        assert max(r.in_flight for r in reps.values()) <= load_cap(total - 1, replicas, epsilon)
        assert max(r.in_flight for r in reps.values()) <= max(
            1, (1 + epsilon) * total / replicas + 1
        )


@given(
    ops=st.lists(
        st.tuples(st.booleans(), st.integers(min_value=0, max_value=9)), min_size=1, max_size=300
    ),
    epsilon=st.sampled_from([0.0, 0.25, 0.5]),
)
def test_each_placement_respects_the_cap_as_requests_come_and_go(
    ops: list[tuple[bool, int]], epsilon: float
) -> None:
    reps = {f"r{i}": Rep() for i in range(4)}
    ring, policy = Ring(reps), PrefixPolicy(epsilon, spill_epsilon=epsilon)
    for arrive, n in ops:
        if arrive or not any(r.in_flight for r in reps.values()):
            total = sum(r.in_flight for r in reps.values())
            key = b"hot" if n < 7 else f"cold-{n}".encode()  # 70% of traffic on one prefix
            name = _place(policy, ring, reps, Route("d/v1", key))
            assert reps[name].in_flight <= load_cap(total, len(reps), epsilon)
        else:
            busy = sorted(name for name, r in reps.items() if r.in_flight)
            reps[busy[n % len(busy)]].in_flight -= 1


def test_a_prefix_goes_to_its_owner_until_the_owner_is_full() -> None:
    reps = {f"r{i}": Rep() for i in range(3)}
    ring, policy = Ring(reps), PrefixPolicy(0.5)
    assert policy.spill_epsilon == 1.0  # spills get more slack than keys by default
    route = Route("d/v1", b"prefix")
    owner = ring.owner(route.key)
    first = policy.choose(ring, reps, route)
    assert first is not None and (first.name, first.outcome) == (owner, "owner")
    reps[owner].in_flight = 3  # cap = ceil(2 * 4 / 3) = 3
    spilled = policy.choose(ring, reps, route)
    assert spilled is not None and spilled.outcome == "spilled" and spilled.name != owner
    assert spilled.name == next(n for n in ring.walk(route.key) if n != owner)
    reps[owner].in_flight = 1  # a spill does not move the key: back to its warm cache
    again = policy.choose(ring, reps, route)
    assert again is not None and (again.name, again.outcome) == (owner, "owner")


def test_a_session_sticks_to_its_replica_unless_that_one_is_overloaded() -> None:
    reps = {f"r{i}": Rep() for i in range(4)}
    ring, policy = Ring(reps), PrefixPolicy(0.25)
    placed = policy.choose(ring, reps, Route("d/v1", b"turn 1", session="alice"))
    assert placed is not None
    first = placed.name
    for turn in range(2, 6):  # other prefixes, same session: same replica
        choice = policy.choose(ring, reps, Route("d/v1", f"turn {turn}".encode(), session="alice"))
        assert choice is not None and (choice.name, choice.outcome) == (first, "session")
    reps[first].in_flight = 10
    moved = policy.choose(ring, reps, Route("d/v1", b"turn 6", session="alice"))
    assert moved is not None and moved.name != first
    reps[first].in_flight = 0
    again = policy.choose(ring, reps, Route("d/v1", b"turn 7", session="alice"))
    assert again is not None and again.name == moved.name  # it stays where its cache now is


def test_a_replica_with_the_adapter_resident_is_preferred() -> None:
    reps = {f"r{i}": Rep() for i in range(4)}
    ring, policy = Ring(reps), PrefixPolicy(0.25)
    key = b"sql-lora\x00prompt"
    owner = ring.owner(key)
    holder = next(n for n in sorted(reps) if n != owner)
    reps[holder].adapters_loaded = frozenset({"sql-lora"})
    choice = policy.choose(ring, reps, Route("d/v1", key, adapter="sql-lora"))
    assert choice is not None and choice.name == holder
    reps[holder].in_flight = 3  # over the cap: the adapter is loaded elsewhere rather than wait
    choice = policy.choose(ring, reps, Route("d/v1", key, adapter="sql-lora"))
    assert choice is not None and choice.name != holder


def test_round_robin_cycles_and_least_loaded_rotates_its_ties() -> None:
    reps = {f"r{i}": Rep() for i in range(3)}
    ring, rr, ll = Ring(reps), RoundRobinPolicy(), LeastLoadedPolicy()
    route = Route("d/v1", b"same")
    picks = [rr.choose(ring, reps, route) for _ in range(6)]
    assert [p.name for p in picks if p] == ["r0", "r1", "r2", "r0", "r1", "r2"]
    ties = [ll.choose(ring, reps, route) for _ in range(3)]
    assert sorted(p.name for p in ties if p) == ["r0", "r1", "r2"]  # equal scores: not one pile
    reps["r0"].in_flight, reps["r2"].in_flight = 2, 1
    assert all((c := ll.choose(ring, reps, route)) and c.name == "r1" for _ in range(4))


def test_no_eligible_replica_gives_no_choice() -> None:
    ring = Ring(["r0"])
    for policy in (PrefixPolicy(0.25), RoundRobinPolicy(), LeastLoadedPolicy()):
        assert policy.choose(ring, {}, Route("d/v1", b"k")) is None


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _owned(table: KeyTable, members: list[str]) -> dict[str, int]:
    return {m: table.owned(m) for m in members}


@given(
    replicas=st.integers(min_value=1, max_value=6),
    epsilon=st.sampled_from([0.0, 0.1, 0.25, 1.0]),
    keys=st.lists(st.integers(min_value=0, max_value=40), min_size=1, max_size=120),
)
def test_no_replica_owns_more_than_the_key_cap(
    replicas: int, epsilon: float, keys: list[int]
) -> None:
    members = [f"r{i}" for i in range(replicas)]
    ring, table = Ring(members), KeyTable(epsilon, clock=Clock())
    for k in keys:
        table.assign(ring, members, f"tenant-{k}".encode())
        cap = load_cap(len(table) - 1, replicas, epsilon)  # ceil((1 + eps) * K / n)
        assert max(_owned(table, members).values()) <= cap
        assert sum(_owned(table, members).values()) == len(table)


def test_eight_tenants_split_evenly_where_the_ring_gives_one_replica_six() -> None:
    members = ["r0", "r1"]
    ring = Ring(members)
    # Tenant sets whose ring owners are lumpy: at least 6 of 8 on one replica.
    lumpy = next(
        keys
        for base in range(1000)
        if (keys := [f"set{base}-tenant-{t}".encode() for t in range(8)])
        and max(sum(ring.owner(k) == m for k in keys) for m in members) >= 6
    )
    for epsilon, most in ((0.0, 4), (0.25, 5)):
        table = KeyTable(epsilon, clock=Clock())
        for _ in range(3):  # assignments stick: the later rounds move nothing
            placed = {k: table.assign(ring, members, k) for k in lumpy}
        assert max(_owned(table, members).values()) <= most
        assert placed == {k: table.replica_of(k) for k in lumpy}


@given(
    members=st.sets(names, min_size=2, max_size=8),
    keys=st.lists(st.integers(min_value=0, max_value=30), min_size=1, max_size=60),
    epsilon=st.sampled_from([0.0, 0.25, 1.0]),
    data=st.data(),
)
def test_a_replica_leaving_or_joining_moves_only_its_own_keys(
    members: set[str], keys: list[int], epsilon: float, data: st.DataObject
) -> None:
    changed = data.draw(st.sampled_from(sorted(members)))
    ring, table = Ring(members), KeyTable(epsilon, clock=Clock())
    distinct = sorted({f"k{k}".encode() for k in keys})
    for k in keys:
        table.assign(ring, members, f"k{k}".encode())
    before = {k: table.replica_of(k) for k in distinct}
    rest = members - {changed}
    after = {k: table.assign(ring, rest, k) for k in distinct}  # `changed` is down
    for k in distinct:
        assert after[k] == before[k] or before[k] == changed
        assert after[k] != changed
    smaller, table = Ring(rest), KeyTable(epsilon, clock=Clock())
    for k in keys:
        table.assign(smaller, rest, f"k{k}".encode())
    before = {k: table.replica_of(k) for k in distinct}
    table.assign(ring, members, distinct[0])  # `changed` joins the ring
    after = {k: table.replica_of(k) for k in distinct}
    for k in distinct:
        assert after[k] == before[k] or after[k] == changed
        if after[k] == changed:
            assert ring.owner(k) == changed  # only keys whose walk now starts at it


def test_idle_keys_expire_and_free_their_share() -> None:
    clock = Clock()
    ring, table = Ring(["r0", "r1"]), KeyTable(0.0, ttl_s=60, clock=clock)
    for t in range(4):
        table.assign(ring, ["r0", "r1"], f"old-{t}".encode())
    assert len(table) == 4
    clock.now = 30
    table.assign(ring, ["r0", "r1"], b"old-0")  # used again: kept
    clock.now = 61
    table.assign(ring, ["r0", "r1"], b"new")
    assert len(table) == 2 and table.replica_of(b"old-1") is None
    assert table.replica_of(b"old-0") is not None


def test_the_key_table_forgets_the_least_recently_used_beyond_its_size() -> None:
    ring, table = Ring(["r0", "r1"]), KeyTable(0.25, max_keys=3, clock=Clock())
    for t in range(5):
        table.assign(ring, ["r0", "r1"], f"k{t}".encode())
    assert len(table) == 3 and table.replica_of(b"k1") is None and table.replica_of(b"k4")
    assert table.owned("r0") + table.owned("r1") == 3
