"""The ring and the policies: consistency under membership changes, bounded load, affinity."""

from dataclasses import dataclass

from hypothesis import assume, given
from hypothesis import strategies as st

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
    ring, policy = Ring(reps), PrefixPolicy(epsilon)
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
    ring, policy = Ring(reps), PrefixPolicy(epsilon)
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
    route = Route("d/v1", b"prefix")
    owner = ring.owner(route.key)
    first = policy.choose(ring, reps, route)
    assert first is not None and (first.name, first.outcome) == (owner, "owner")
    reps[owner].in_flight = 5  # cap = ceil(1.5 * 6 / 3) = 3
    spilled = policy.choose(ring, reps, route)
    assert spilled is not None and spilled.outcome == "spilled" and spilled.name != owner
    assert spilled.name == next(n for n in ring.walk(route.key) if n != owner)


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
