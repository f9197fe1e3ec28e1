"""The members a daemon keeps in its store, and how a restarted one dials them."""

import random
from pathlib import Path

import pytest

from shipyard.distribute.known_members import KEEP, KEY, SAVE_EVERY, KnownMembers
from shipyard.distribute.membership import HaveMap, Membership
from shipyard.store import LocalBackend


def test_saves_round_trip_and_keep_a_bounded_sample(tmp_path: Path) -> None:
    known = KnownMembers(LocalBackend(tmp_path), random.Random(1))
    assert known.load() == []  # a daemon's first run
    swarm = [f"10.0.{i // 250}.{i % 250}:7000" for i in range(1000)]
    members = known.to_save(swarm, now=0.0)
    assert members is not None and len(members) == KEEP and set(members) <= set(swarm)
    known.save(members)
    assert known.load() == members


def test_a_save_is_due_at_once_while_it_grows_and_now_and_then_once_saved_members_die(
    tmp_path: Path,
) -> None:
    known = KnownMembers(LocalBackend(tmp_path), random.Random(1))
    assert known.to_save([], now=0.0) is None  # nobody known yet: keep what a restart remembers
    assert known.to_save(["a:1"], now=0.0) == ["a:1"]
    assert known.to_save(["a:1", "b:1"], now=0.1) == ["a:1", "b:1"]  # grew: saved at once
    assert known.to_save(["b:1", "a:1"], now=0.2) is None  # unchanged
    swarm = ["a:1", "b:1"] + [f"m{i}:1" for i in range(2 * KEEP)]
    first = known.to_save(swarm, now=0.3)
    assert first is not None and len(first) == KEEP
    unsaved = [m for m in swarm if m not in first]
    assert known.to_save(unsaved[1:] + first, now=0.4) is None  # churn elsewhere
    survivors = first[1:]
    assert known.to_save(survivors + unsaved, now=SAVE_EVERY / 2) is None  # a saved one died
    second = known.to_save(survivors + unsaved, now=0.3 + SAVE_EVERY)
    assert second is not None and len(second) == KEEP and set(survivors) < set(second)


@pytest.mark.parametrize(
    "body", [b"{not json", b'{"members": "a:1"}', b'{"members": ["a:1", "nohost"]}', b"\xff"]
)
def test_an_unreadable_record_is_named_and_ignored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: bytes
) -> None:
    backend = LocalBackend(tmp_path)
    backend.put(KEY, body)
    assert KnownMembers(backend, random.Random(1)).load() == []
    assert f"known members {KEY}:" in capsys.readouterr().err
    assert backend.get(KEY) == body  # replaced only by the next save


def test_remembered_members_are_dialled_only_while_too_few_are_known() -> None:
    now = [0.0]
    peer = Membership("me:1", ["seed:1"], dead_after=3, clock=lambda: now[0])
    peer.remember(["me:1", "seed:1", "a:1", "b:1", "c:1", "d:1"])
    assert peer.remembered == ["a:1", "b:1", "c:1", "d:1"]  # not itself, not a seed twice
    rng = random.Random(1)
    first = peer.gossip_targets(fanout=3, rng=rng)
    assert "seed:1" in first and len(set(first) & set(peer.remembered)) == 3

    for member in ("a:1", "x:1"):  # two members alive: one remembered member more is dialled
        other = Membership(member, [], dead_after=3, clock=lambda: now[0])
        other.beat({"art": HaveMap(True, 0)})
        peer.merge(other.view())
    targets = peer.gossip_targets(fanout=3, rng=rng)
    assert {"a:1", "x:1"} <= set(targets)
    assert len(set(targets) & {"b:1", "c:1", "d:1"}) == 1

    third = Membership("y:1", [], dead_after=3, clock=lambda: now[0])
    third.beat({})
    peer.merge(third.view())
    targets = peer.gossip_targets(fanout=3, rng=rng)  # enough alive: no remembered member
    assert set(targets) - {"seed:1"} == {"a:1", "x:1", "y:1"}
