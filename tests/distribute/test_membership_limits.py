"""The bounds on what gossip can make one peer believe, as pure functions with a fixed clock."""

from shipyard.distribute.membership import (
    FORGET_AFTER,
    MAX_AHEAD_MS,
    MAX_MEMBERS,
    HaveMap,
    Membership,
    encode_bits,
)
from shipyard.distribute.messages import MAX_ARTIFACTS, VIEW_MEMBERS

NOW_MS = 1_700_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def member(i: int) -> str:
    return f"10.{i >> 16}.{i >> 8 & 255}.{i & 255}:7000"


def test_records_stop_at_the_cap_and_views_name_a_sample() -> None:
    me = Membership("me:1", [], dead_after=3, wall_ms=lambda: NOW_MS)
    me.beat({})
    for start in range(0, 2 * MAX_MEMBERS, VIEW_MEMBERS):
        me.merge({member(i): [NOW_MS, {}] for i in range(start, start + VIEW_MEMBERS)})
    assert len(me.records) == MAX_MEMBERS  # the first to come, and this peer
    assert member(0) in me.records and member(MAX_MEMBERS) not in me.records
    view = me.view(to="new:1")
    assert len(view) <= VIEW_MEMBERS and "me:1" in view
    # A known member's news still counts when the records are full.
    me.merge({member(0): [NOW_MS + 1, {}]})
    assert me.records[member(0)].heartbeat == NOW_MS + 1


def test_heartbeats_far_ahead_of_the_clock_are_ignored() -> None:
    me = Membership("me:1", [], dead_after=3, wall_ms=lambda: NOW_MS)
    far = NOW_MS + MAX_AHEAD_MS + 1
    me.merge({"me:1": [far, {}], "x:1": [far, {}], "y:1": [NOW_MS + MAX_AHEAD_MS, {}]})
    me.beat({})
    assert me.records["me:1"].heartbeat == NOW_MS  # not pushed past its own clock's bound
    assert me.alive() == ["y:1"]


def test_direct_news_only_from_known_members_and_of_a_bounded_number_of_artifacts() -> None:
    me = Membership("me:1", [], dead_after=3)
    me.note_have("stranger:1", "art", encode_bits(0b1))
    assert "stranger:1" not in me._direct
    known = Membership("known:1", [], dead_after=3)
    known.beat({"art": HaveMap(True, 0)})
    me.merge(known.view())
    for i in range(MAX_ARTIFACTS + 10):
        me.note_have("known:1", f"{i:064x}", encode_bits(0b1))
    assert len(me._direct["known:1"]) == MAX_ARTIFACTS


def test_a_forgotten_member_leaves_no_trace() -> None:
    clock = Clock()
    me = Membership("me:1", [], dead_after=3, clock=clock)
    me.merge({"x:1": [5, {}]})
    clock.now = FORGET_AFTER + 1
    me.view()  # forgetting happens as views are made
    assert "x:1" not in me.records and "x:1" not in me._floor
