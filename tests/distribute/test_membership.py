"""Gossip membership and piece choice as pure functions, with a hand-driven clock."""

import math
import random
import re

import numpy as np

from shipyard.distribute.membership import HaveMap, Membership, encode_bits
from shipyard.distribute.picker import Availability, choose_peer, rarest_first
from shipyard.distribute.relay import RelayPlan, _key, rendezvous_owners


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


def test_malformed_gossip_is_ignored() -> None:
    a = Membership("a:1", [], dead_after=3)
    a.merge({"x:1": "garbage", "y:1": [1, {"art": [True, "!!"]}], "z:1": [5, {}]})
    assert a.alive() == ["z:1"]


def test_rendezvous_owner_moves_only_when_it_leaves() -> None:
    members = [f"h{i}:1" for i in range(20)]
    pieces = [f"{i:064x}" for i in range(200)]
    before = {p: rendezvous_owners(p, members, 1)[0] for p in pieces}
    gone = members[3]
    after = {p: rendezvous_owners(p, [m for m in members if m != gone], 1)[0] for p in pieces}
    moved = {p for p in pieces if before[p] != after[p]}
    assert moved == {p for p in pieces if before[p] == gone}
    assert 0 < len(moved) < 40  # about 1/20 of the pieces


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


def test_relay_trees_agree_across_peers_and_spread_the_uploads() -> None:
    members = [f"10.0.0.{i}:7000" for i in range(16)]
    hashes = [f"{i:064x}" for i in range(400)]
    plans = {m: RelayPlan(hashes, members, m, fanout=2, owners=1) for m in members}
    uploads = dict.fromkeys(members, 0)
    for index in range(len(hashes)):
        roots = [m for m in members if plans[m].parents[index] is None]
        assert len(roots) == 1 and index in plans[roots[0]].owned
        for member in members:
            parent = plans[member].parents[index]
            if parent is not None:  # the parent's own plan names this member as its child
                assert member in plans[parent].children[index]
            uploads[member] += len(plans[member].children[index])
            assert len(plans[member].children[index]) <= 2
    # Every piece is uploaded once per non-root member, and no uplink carries much more than
    # its share (15/16 of a copy per piece on average).
    assert sum(uploads.values()) == 15 * len(hashes)
    assert max(uploads.values()) < 1.4 * 15 * len(hashes) / 16
    # Nor in bursts: runs of consecutive pieces for which a member is an inner node are short
    # (turning the ring by one place per piece made runs of 7 or more), so no uplink queues a
    # long backlog while another idles.
    runs = []
    for member in members:
        inner = "".join("1" if plans[member].children[i] else "0" for i in range(len(hashes)))
        runs += [len(run) for run in re.findall("1+", inner)]
    assert max(runs) <= 5 and sum(runs) / len(runs) < 1.5


def _coprime_half(size: int) -> int:
    return next(s for s in range(max(size // 2, 1), size + 2) if math.gcd(s, size) == 1)


def test_relay_plan_matches_the_whole_order_built_naively() -> None:
    rng = random.Random(7)
    for trial in range(20):
        members = [f"10.0.{trial}.{i}:7000" for i in range(rng.randint(1, 12))]
        hashes = [f"{rng.getrandbits(256):064x}" for _ in range(30)]
        fanout, owners = rng.randint(1, 3), rng.randint(1, 2)
        ring = sorted(members, key=_key)
        for me in members:
            plan = RelayPlan(hashes, members, me, fanout, owners)
            for index, piece in enumerate(hashes):
                roots = rendezvous_owners(piece, members, owners)
                rest = [m for m in ring if m not in roots]
                turn = index * _coprime_half(len(rest)) % len(rest) if rest else 0
                order = [*roots, *rest[turn:], *rest[:turn]]
                rank = order.index(me)
                assert plan.parents[index] == (order[(rank - 1) // fanout] if rank else None)
                assert plan.children[index] == order[rank * fanout + 1 : rank * fanout + fanout + 1]
                assert (index in plan.owned) == (rank < owners)


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
