"""Gossip membership and piece choice as pure functions, with a hand-driven clock."""

import random

import numpy as np

from shipyard.distribute.membership import HaveMap, Membership, encode_bits
from shipyard.distribute.origin_stall import STALL_AFTER, OriginStall
from shipyard.distribute.picker import Availability, choose_peer, rarest_first, upstream_picks
from shipyard.distribute.relay import RelayPlan, mesh_offsets, owner_lists


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_views_converge_and_silent_members_die() -> None:
    clock = Clock()
    a = Membership("a:1", ["b:1"], dead_after=3, clock=clock)
    b = Membership("b:1", [], dead_after=3, clock=clock)
    c = Membership("c:1", ["b:1"], dead_after=3, clock=clock)
    for m in (a, b, c):
        m.beat({"art": HaveMap(True, 0b101)})
    b.merge(a.view())
    b.merge(c.view())
    a.merge(b.view())  # a learns of c through b, never having talked to it
    assert sorted(a.alive()) == ["b:1", "c:1"]
    assert a.records["c:1"].haves["art"].has(2)
    clock.now = 4.0
    b.beat({})
    a.merge(b.view())  # b's view still carries c's old record: no news, so c stays dead
    assert a.alive() == ["b:1"]


def test_stale_gossip_does_not_resurrect_and_failure_is_local() -> None:
    clock = Clock()
    a = Membership("a:1", [], dead_after=3, clock=clock)
    b = Membership("b:1", [], dead_after=3, clock=clock)
    b.beat({})
    old = b.view()
    a.merge(old)
    a.fail("b:1")
    assert a.alive() == []
    a.merge(old)  # the same heartbeat again is not a sign of life
    assert a.alive() == []
    b.beat({})
    a.merge(b.view())
    assert a.alive() == ["b:1"]


def test_a_member_restarted_with_its_clock_behind_is_told_the_heartbeat_to_beat() -> None:
    clock = Clock()
    wall = {"a:1": 10_000, "b:1": 10_000}
    a = Membership("a:1", [], dead_after=3, clock=clock, wall_ms=lambda: wall["a:1"])
    b = Membership("b:1", [], dead_after=3, clock=clock, wall_ms=lambda: wall["b:1"])
    a.beat({})
    b.merge(a.view())
    clock.now = 10.0  # a's first life died long ago; b still remembers its last heartbeat
    wall["a:1"] = 5_000  # the new life's clock is 5 s behind the old one's last tick
    a = Membership("a:1", ["b:1"], dead_after=3, clock=clock, wall_ms=lambda: wall["a:1"])
    a.beat({})
    b.merge(a.view())
    assert b.alive() == []  # 5,000 is old news next to 10,000
    a.merge(b.view(to="a:1"))  # the reply names the heartbeat to beat
    a.beat({})
    assert a.records["a:1"].heartbeat == 10_001
    b.merge(a.view())
    assert b.alive() == ["a:1"]
    # Others' views of it never raise its heartbeat past its own next tick.
    a.merge(b.view(to="a:1"))
    wall["a:1"] = 20_000
    a.beat({})
    assert a.records["a:1"].heartbeat == 20_000


def test_malformed_gossip_is_ignored() -> None:
    a = Membership("a:1", [], dead_after=3)
    a.merge({"x:1": "garbage", "y:1": [1, {"art": [True, "!!"]}], "z:1": [5, {}], "a:1": "?"})
    assert a.alive() == ["z:1"]


def test_owners_have_bounded_loads_and_mostly_stay_put() -> None:
    members = [f"h{i}:1" for i in range(20)]
    pieces = [f"{i:064x}" for i in range(1000)]
    before = owner_lists(pieces, members, 1)
    loads = {m: sum(owners == [m] for owners in before) for m in members}
    assert set(loads.values()) == {50}  # 1,000 pieces over 20 owners, none more than its share
    gone = members[3]
    after = owner_lists(pieces, [m for m in members if m != gone], 1)
    assert all(owners[0] != gone for owners in after)
    # The leaver's pieces move, and only a few others move between survivors to stay balanced.
    kept = sum(b == a for b, a in zip(before, after, strict=True) if b[0] != gone)
    assert kept >= 0.9 * 950
    two = owner_lists(pieces, members, 2)
    assert all(len(set(owners)) == 2 for owners in two)
    assert max(sum(m in owners for owners in two) for m in members) <= 101  # share, or one over


def test_backups_are_other_members_with_bounded_loads() -> None:
    members = [f"h{i}:1" for i in range(16)]
    hashes = [f"{i:064x}" for i in range(256)]
    plans = {m: RelayPlan(hashes, members, m, degree=4, owners=1) for m in members}
    for index in range(len(hashes)):
        backups = [m for m, plan in plans.items() if plan.backed_mask[index]]
        owner = [m for m, plan in plans.items() if index in plan.owned]
        assert len(backups) == 1 and backups != owner
    loads = [int(plan.backed_mask.sum()) for plan in plans.values()]
    assert max(loads) <= 16 + 2  # the share, 256 / 16, or a little over for the last pieces


def test_only_the_gateways_own_or_back_up_and_a_leaving_one_is_replaced() -> None:
    members = [f"h{i}:1" for i in range(32)]
    hashes = [f"{i:064x}" for i in range(256)]
    plans = {m: RelayPlan(hashes, members, m, degree=4, owners=1, gateways=8) for m in members}
    gateways = {m for m, plan in plans.items() if plan.owned}
    assert len(gateways) == 8
    assert {len(plans[m].owned) for m in gateways} == {32}  # 256 pieces over 8, bounded
    assert {m for m, plan in plans.items() if plan.backed_mask.any()} == gateways
    # Every member works the gateways out alike; one that leaves is replaced by another member,
    # and the other gateways keep most of their pieces.
    gone = sorted(gateways)[0]
    before = owner_lists(hashes, members, 1, gateways=8)
    after = owner_lists(hashes, [m for m in members if m != gone], 1, gateways=8)
    assert len({o[0] for o in after}) == 8 and gone not in {o[0] for o in after}
    assert len({o[0] for o in after} - gateways) == 1
    kept = sum(b == a for b, a in zip(before, after, strict=True) if b[0] != gone)
    assert kept >= 0.8 * (256 - 32)
    # 0, or as many gateways as members or more: every member is one.
    for count in (0, 32, 40):
        assert len({o[0] for o in owner_lists(hashes, members, 1, gateways=count)}) == 32


def test_a_backup_takes_the_far_end_of_a_slower_owners_list() -> None:
    members = ["a:1", "b:1", "c:1", "d:1"]
    hashes = [f"{i:064x}" for i in range(64)]
    plan = RelayPlan(hashes, members, "a:1", degree=2, owners=1)
    everything = np.arange(len(hashes))
    nowhere = np.ones(len(hashes), dtype=bool)
    # While it has pieces of its own nobody holds, an owner fetches those, in order.
    assert plan.origin_picks(everything, nowhere) == sorted(plan.owned)
    nowhere[list(plan.owned)] = False
    lists = {o: np.flatnonzero(plan.first_owner == o).tolist() for o in range(1, 4)}
    pick = plan.origin_picks(everything, nowhere)
    # Then the backed-up piece furthest down any owner's list: every owner has 16 left, so
    # the latest piece it backs up in any list.
    backed = [(lst.index(i), i) for lst in lists.values() for i in lst if plan.backed_mask[i]]
    assert pick == [max(backed)[1]]
    # Never one of the first two an owner has left: it may be fetching those already.
    owner = lists[int(plan.first_owner[pick[0]])]
    at = owner.index(pick[0])
    nowhere[:] = False
    nowhere[owner[at - 2 : at + 1]] = True
    assert plan.backup_pick(everything, nowhere) == pick[0]
    nowhere[owner[at - 2]] = False
    assert plan.backup_pick(everything, nowhere) is None
    nowhere[owner[at - 2]] = True
    assert plan.backup_pick(everything[everything != pick[0]], nowhere) is None  # in flight
    # Unless the origin's pieces have stopped reaching the swarm: then even an owner's last.
    nowhere[:] = False
    nowhere[pick[0]] = True
    assert plan.origin_picks(everything, nowhere) == []
    assert plan.origin_picks(everything, nowhere, stalled=True) == pick


def test_the_origin_counts_as_stalled_once_no_piece_left_nowhere_for_a_while() -> None:
    stall = OriginStall()
    assert not stall.stalled(10, now=0.0)
    assert not stall.stalled(10, now=STALL_AFTER - 0.1)
    assert not stall.stalled(9, now=STALL_AFTER)  # a piece reached the swarm: the wait restarts
    assert not stall.stalled(11, now=STALL_AFTER + 1)  # a failed piece back in the set is no news
    assert stall.stalled(11, now=2 * STALL_AFTER)
    assert not stall.stalled(0, now=3 * STALL_AFTER)  # nothing nowhere: nothing to stall


def test_rarest_first_and_least_loaded_peer() -> None:
    haves = {"a": HaveMap(True, 0b111), "b": HaveMap(True, 0b011), "c": HaveMap(True, 0b001)}
    avail = Availability(haves, 4)
    assert rarest_first([0, 1, 2, 3], avail.counts, np.random.default_rng(1)) == [
        2,
        1,
        0,
    ]  # 3: nobody
    assert avail.holders(1) == ["a", "b"]
    ties = Availability({"a": HaveMap(True, 0b1111)}, 4).counts
    orders = {tuple(rarest_first([0, 1, 2, 3], ties, np.random.default_rng(s))) for s in range(10)}
    assert len(orders) > 1  # equally rare pieces are taken in random order
    rng = random.Random(3)
    assert choose_peer(["a", "b"], {"a": 1}, 2, rng) == "b"
    assert choose_peer(["a", "b"], {"a": 2, "b": 2}, 2, rng) is None
    assert {choose_peer(["a", "b"], {}, 2, rng) for _ in range(20)} == {"a", "b"}  # no herding


def test_each_upstream_peer_gets_one_request_for_the_rarest_piece_it_has() -> None:
    haves = {"a": HaveMap(True, 0b0111), "b": HaveMap(True, 0b0011), "c": HaveMap(True, 0b1001)}
    avail = Availability(haves, 5)
    todo = np.array([0, 1, 2, 3, 4])
    picks = upstream_picks(todo, avail, ["a", "b", "gone", "c"], np.random.default_rng(0))
    # a: 2 and 3 are rarest (one holder), 2 is a's; b: 1 (0 has three holders); c: 3 (its
    # rarest); "gone" holds nothing live; 4 is held by nobody. No piece is asked for twice.
    assert picks == [(2, "a"), (1, "b"), (3, "c")]
    assert upstream_picks(todo[:1], avail, ["a", "b"], np.random.default_rng(0)) == [(0, "a")]


def test_direct_have_news_adds_to_gossip_and_bad_news_is_ignored() -> None:
    a = Membership("a:1", [], dead_after=3)
    b = Membership("b:1", [], dead_after=3)
    b.beat({"art": HaveMap(True, 0b0011)})
    a.merge(b.view())
    a.note_have("b:1", "art", encode_bits(0b1100))  # fresher than b's last heartbeat
    a.note_have("b:1", "art", "not base64!")
    a.note_have("a:1", "art", encode_bits(0b1))  # news of itself is not taken from others
    have = a.have_of("b:1", "art")
    assert have == HaveMap(True, 0b1111)
    assert a.have_of("a:1", "art") is None and a.wants_all("b:1", "art")


def test_availability_ignores_bits_past_the_last_piece() -> None:
    avail = Availability({"a": HaveMap(True, 0b1 | 1 << 200)}, 4)  # a stray bit from gossip
    assert avail.counts.tolist() == [1, 0, 0, 0]


def test_mesh_is_symmetric_balanced_and_shallow() -> None:
    assert mesh_offsets(16, 4) == [1, 2, 4, 8]
    assert mesh_offsets(1000, 4) == [1, 6, 32, 178]
    assert mesh_offsets(3, 4) == [1, 2] and mesh_offsets(1, 4) == []
    for count in (2, 5, 16, 40):
        members = [f"10.0.0.{i}:7000" for i in range(count)]
        hashes = [f"{i:064x}" for i in range(64)]
        plans = {m: RelayPlan(hashes, members, m, degree=4, owners=1) for m in members}
        for member, plan in plans.items():
            assert member not in plan.upstream and len(set(plan.upstream)) == len(plan.upstream)
            assert len(plan.upstream) == len(plan.downstream) == min(4, count - 1)
            for peer in plan.upstream:  # I fetch from you exactly when you serve me
                assert member in plans[peer].downstream
        # Every member hears of a piece from every other within a few hops.
        start = members[0]
        seen, frontier, hops = {start}, {start}, 0
        while len(seen) < count:
            frontier = {d for m in frontier for d in plans[m].downstream} - seen
            seen |= frontier
            hops += 1
        assert hops <= 4
        # Each piece has exactly one owner, and the plans agree on it.
        for index in range(len(hashes)):
            assert sum(index in plan.owned for plan in plans.values()) == 1


def test_views_carry_bits_for_a_few_members_and_keep_what_is_known() -> None:
    hub = Membership("hub:1", [], dead_after=3, haves_per_view=4, rng=random.Random(3))
    others = [Membership(f"m{i}:1", [], dead_after=3) for i in range(20)]
    for i, member in enumerate(others):
        member.beat({"art": HaveMap(True, 1 << i)})
        hub.merge(member.view())
    hub.beat({"art": HaveMap(True, 0)})
    view = hub.view()
    assert len(view) == 21  # every live member's heartbeat and wants travel
    with_bits = [m for m, (_, haves) in view.items() if haves["art"][1] is not None]
    assert "hub:1" in with_bits and len(with_bits) == 5
    # A newer record without bits keeps the bits already known, and the wants it carries.
    reader = Membership("reader:1", [], dead_after=3)
    reader.merge(others[7].view())
    others[7].beat({"art": HaveMap(False, 1 << 7)})
    heartbeat = others[7].view()["m7:1"][0]
    reader.merge({"m7:1": [heartbeat, {"art": [False, None]}]})
    assert reader.have_of("m7:1", "art") == HaveMap(False, 1 << 7)
    reader.merge({"m8:1": [5, {"art": [True, None]}], "m9:1": [5, "not a dict"]})
    assert reader.have_of("m8:1", "art") == HaveMap(True, 0)
    assert reader.have_of("m9:1", "art") is None
