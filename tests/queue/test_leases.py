"""Leases: claim order, expiry and reclaim, fencing tokens, dead letters, idempotent enqueue.

Every test runs on SQLite and on a real PostgreSQL server (the `db_url` fixture). Time is a
clock the test moves, so a lease expires when the test says, not after a sleep.
"""

from collections.abc import Iterator
from typing import Any

import pytest

from shipyard.db import Database
from shipyard.errors import Conflict, InvalidInput, NotFound
from shipyard.queue import Queue, StaleLease


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def queue(db_url: str, clock: Clock) -> Iterator[Queue]:
    q = Queue(Database(db_url), owner="worker-a", clock=clock)
    q.create("jobs", max_attempts=3)
    yield q
    q.close()


@pytest.fixture
def other(db_url: str, clock: Clock, queue: Queue) -> Iterator[Queue]:
    """A second worker on its own connection."""
    q = Queue(Database(db_url), owner="worker-b", clock=clock)
    yield q
    q.close()


def test_claims_come_by_priority_then_age_and_not_before_their_time(
    queue: Queue, clock: Clock
) -> None:
    low, _ = queue.enqueue("jobs", "low")
    high, _ = queue.enqueue("jobs", "high", priority=5)
    later, _ = queue.enqueue("jobs", "later", priority=9, delay=60)
    low2, _ = queue.enqueue("jobs", "low2")
    assert [i.id for i in queue.claim("jobs", 10, lease=300)] == [high, low, low2]
    assert queue.claim("jobs", 10, lease=300) == []
    clock.now += 61
    (item,) = queue.claim("jobs", 10, lease=30)
    assert (item.id, item.payload, item.priority) == (later, "later", 9)


def test_an_expired_lease_is_claimed_again_and_the_old_token_is_refused(
    queue: Queue, other: Queue, clock: Clock
) -> None:
    queue.enqueue("jobs", {"n": 1})
    (mine,) = queue.claim("jobs", lease=10)
    clock.now += 5
    assert other.claim("jobs") == []  # still leased
    clock.now += 6
    (theirs,) = other.claim("jobs", lease=10)
    assert (theirs.id, theirs.attempt) == (mine.id, 2)
    assert theirs.token > mine.token
    for act in (
        lambda: queue.heartbeat(mine.id, mine.token, 10),
        lambda: queue.complete(mine.id, mine.token, "zombie result"),
        lambda: queue.fail(mine.id, mine.token, "zombie failure"),
        lambda: queue.release(mine.id, mine.token),
    ):
        with pytest.raises(StaleLease, match=f"now leased under token {theirs.token} by worker-b"):
            act()
    record = queue.get(mine.id)
    assert (record.state, record.lease_owner, record.result) == ("leased", "worker-b", None)
    assert [(a.owner, a.outcome) for a in record.history] == [
        ("worker-a", "expired"),
        ("worker-b", None),
    ]
    other.complete(theirs.id, theirs.token, "their result")
    assert queue.get(mine.id).result == "their result"


def test_a_lease_that_expired_unclaimed_is_still_refused(queue: Queue, clock: Clock) -> None:
    queue.enqueue("jobs", 1)
    (item,) = queue.claim("jobs", lease=10)
    clock.now += 10.5
    with pytest.raises(StaleLease, match=r"lease expired 0\.5 s ago; nothing was changed"):
        queue.complete(item.id, item.token, "late")
    assert queue.get(item.id).state == "leased"  # until a claim sweeps it


def test_a_heartbeat_keeps_the_item(queue: Queue, other: Queue, clock: Clock) -> None:
    queue.enqueue("jobs", 1)
    (item,) = queue.claim("jobs", lease=10)
    for _ in range(5):
        clock.now += 8
        queue.heartbeat(item.id, item.token, 10)
        assert other.claim("jobs") == []
    queue.complete(item.id, item.token, "ok")
    assert queue.get(item.id).state == "done"


def test_the_result_and_the_effect_commit_with_the_completion_or_not_at_all(
    queue: Queue, clock: Clock
) -> None:
    queue.db.run("CREATE TABLE effects (item_id INTEGER PRIMARY KEY)")

    def effect_of(item_id: int) -> Any:
        return lambda db: db.run("INSERT INTO effects VALUES (?)", (item_id,))

    def boom(db: Database) -> None:
        raise RuntimeError("effect failed")

    queue.enqueue_many("jobs", [1, 2])
    first, second = queue.claim("jobs", 2, lease=10)
    queue.complete(first.id, first.token, "r1", effect=effect_of(first.id))
    queue.complete(first.id, first.token, "r1", effect=effect_of(first.id))  # a retry: no-op
    with pytest.raises(RuntimeError):
        queue.complete(second.id, second.token, "r2", effect=boom)
    assert queue.get(second.id).state == "leased"  # the failed effect took the completion back
    clock.now += 11
    with pytest.raises(StaleLease):
        queue.complete(second.id, second.token, "late", effect=effect_of(second.id))
    assert queue.db.rows("SELECT item_id FROM effects") == [(first.id,)]
    assert queue.get(first.id).result == "r1"


def test_failures_retry_then_dead_letter_with_the_history_of_each_attempt(
    queue: Queue, clock: Clock
) -> None:
    item_id, _ = queue.enqueue("jobs", {"bad": True})
    (item,) = queue.claim("jobs", lease=10)
    assert queue.fail(item.id, item.token, "exit 1: disk full", retry_in=30) == "ready"
    assert queue.claim("jobs") == []  # not before its retry time
    clock.now += 31
    (item,) = queue.claim("jobs", lease=10)
    clock.now += 11  # the second attempt's worker vanishes
    (item,) = queue.claim("jobs", lease=10)
    assert item.attempt == 3
    assert queue.fail(item.id, item.token, "exit 1: disk full again") == "dead"
    assert queue.claim("jobs") == []
    (dead,) = queue.dead("jobs")
    assert dead.id == item_id and dead.attempts == 3
    assert [(a.attempt, a.outcome, a.reason) for a in dead.history] == [
        (1, "failed", "exit 1: disk full"),
        (2, "expired", "lease expired"),
        (3, "failed", "exit 1: disk full again"),
    ]
    assert queue.requeue("jobs") == 1
    (again,) = queue.claim("jobs")
    assert (again.id, again.attempt) == (item_id, 1)
    assert len(queue.get(item_id).history) == 4  # the history survives the requeue


def test_an_expired_last_attempt_dead_letters_the_item(queue: Queue, clock: Clock) -> None:
    queue.enqueue("jobs", "x", max_attempts=1)
    assert len(queue.claim("jobs", lease=10)) == 1
    clock.now += 11
    assert queue.claim("jobs") == []
    (dead,) = queue.dead("jobs")
    assert [a.outcome for a in dead.history] == ["expired"]
    stats = {s.queue: s for s in queue.stats()}["jobs"]
    assert (stats.dead, stats.leased, stats.ready, stats.claims) == (1, 0, 0, 1)


def test_a_release_gives_the_item_back_without_spending_an_attempt(
    queue: Queue, other: Queue
) -> None:
    queue.enqueue("jobs", "x", max_attempts=1)
    (item,) = queue.claim("jobs", lease=10)
    queue.release(item.id, item.token, "worker stopping")
    (again,) = other.claim("jobs", lease=10)
    assert (again.id, again.attempt) == (item.id, 1)
    assert [a.outcome for a in queue.get(item.id).history] == ["released", None]


def test_enqueue_by_key_is_idempotent(queue: Queue) -> None:
    first = queue.enqueue("jobs", {"shard": 7}, key="shard-7")
    assert queue.enqueue("jobs", {"shard": 7}, key="shard-7") == (first[0], False)
    with pytest.raises(Conflict, match="under key 'shard-7', with another payload"):
        queue.enqueue("jobs", {"shard": 8}, key="shard-7")
    (item,) = queue.claim("jobs")
    queue.complete(item.id, item.token)
    assert queue.enqueue("jobs", {"shard": 7}, key="shard-7") == (first[0], False)  # done once
    assert queue.claim("jobs") == []


def test_a_batch_with_one_bad_payload_adds_nothing(queue: Queue) -> None:
    with pytest.raises(InvalidInput, match="payload 1 for queue 'jobs' is not JSON"):
        queue.enqueue_many("jobs", [1, {1, 2}, 3])
    with pytest.raises(InvalidInput, match=r"payload 0 .* not JSON"):
        queue.enqueue("jobs", float("nan"))
    assert queue.items("jobs") == []


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda q: q.claim("nope"), NotFound, "queue 'nope' does not exist"),
        (lambda q: q.enqueue("nope", 1), NotFound, "queue 'nope' does not exist"),
        (lambda q: q.claim("jobs", lease=-1), InvalidInput, "lease -1: seconds must be greater"),
        (lambda q: q.claim("jobs", lease=0), InvalidInput, "lease 0"),
        (lambda q: q.claim("jobs", 0), InvalidInput, "claim count 0"),
        (lambda q: q.claim("../x"), InvalidInput, "queue name '../x'"),
        (lambda q: q.enqueue("jobs", 1, delay=-5), InvalidInput, "delay -5"),
        (lambda q: q.enqueue("jobs", 1, priority=2**40), InvalidInput, "priority"),
        (lambda q: q.enqueue("jobs", 1, key=""), InvalidInput, "item key ''"),
        (lambda q: q.create("jobs", max_attempts=5), Conflict, "max attempts 3, not 5"),
        (lambda q: q.heartbeat(999, 1, 10), NotFound, "queue item 999 does not exist"),
        (lambda q: q.items("jobs", "paused"), InvalidInput, "item state 'paused'"),
    ],
)
def test_bad_input_is_refused_by_name_and_changes_nothing(
    queue: Queue, call: Any, error: type[Exception], message: str
) -> None:
    queue.enqueue("jobs", "keep")
    with pytest.raises(error, match=message):
        call(queue)
    assert [(i.payload, i.state) for i in queue.items("jobs")] == [("keep", "ready")]
    assert queue.names() == ["jobs"]


def test_a_batch_completion_refuses_only_the_stale_leases(
    queue: Queue, other: Queue, clock: Clock
) -> None:
    queue.enqueue_many("jobs", ["a", "b"])
    (a,) = queue.claim("jobs", lease=10)
    (b,) = queue.claim("jobs", lease=100)
    clock.now += 11
    (a2,) = other.claim("jobs", lease=10)
    refused = queue.complete_many([(a, "zombie"), (b, "fine"), (b, "fine")])
    assert [str(e) for e in refused] == [
        f"cannot complete item {a.id} under lease token {a.token}: the item is now "
        f"leased under token {a2.token} by worker-b; nothing was changed"
    ]
    assert (queue.get(b.id).state, queue.get(b.id).result) == ("done", "fine")
    assert (queue.get(a.id).state, queue.get(a.id).result) == ("leased", None)
