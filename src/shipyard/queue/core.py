"""Named queues of leased work items on Shipyard's database (SQLite or PostgreSQL).

A worker claims items under a lease (`claim`), keeps it alive (`heartbeat`), and ends it with
`complete` (the result, and any writes of `effect`, commit in the same transaction), `fail`
(retried until `max_attempts`, then dead-lettered with its history) or `release`. A lease that
expires makes its item claimable again. Each lease carries a fencing token: a call under a
token that is no longer the item's live lease raises `StaleLease` and changes nothing, so a
worker that stalled past its lease can never complete an item someone else now holds.

Times come from `clock` (default `time.time`): hosts sharing a queue need clocks that agree to
well within a lease.
"""

import os
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from shipyard.db import Database, ensure
from shipyard.errors import Conflict, NotFound
from shipyard.queue import leases, listing
from shipyard.queue.model import (
    MAX_ATTEMPTS,
    MAX_CLAIM,
    MAX_REASON_CHARS,
    PRIORITY_RANGE,
    Item,
    ItemRecord,
    QueueStats,
    StaleLease,
    check_int,
    check_key,
    check_queue_name,
    check_seconds,
    encode_json,
)
from shipyard.queue.schema import QUEUE

CHANNEL = "shipyard_queue"  # PostgreSQL NOTIFY channel; the payload is the queue's name
Effect = Callable[[Database], None]


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class Queue:
    def __init__(
        self,
        db: Database,
        *,
        owner: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.db = db
        self.owner = owner or default_owner()
        self.clock = clock
        self._known: set[str] = set()  # queues seen to exist (queues are never deleted)
        ensure(db, QUEUE)

    def close(self) -> None:
        self.db.close()

    # Queues

    def create(self, queue: str, max_attempts: int = 3) -> bool:
        """Create `queue`; True if made now. Creating it again with the same settings is a
        no-op, with different ones a `Conflict`."""
        check_queue_name(queue)
        check_int(max_attempts, "max attempts", 1, MAX_ATTEMPTS)
        made = self.db.run(
            "INSERT INTO queue_queues VALUES (?, ?, ?) ON CONFLICT (name) DO NOTHING",
            (queue, max_attempts, self.clock()),
        )
        if not made:
            (existing,) = self.db.rows(
                "SELECT max_attempts FROM queue_queues WHERE name = ?", (queue,)
            )[0]
            if existing != max_attempts:
                raise Conflict(
                    f"queue {queue!r} exists with max attempts {existing}, not {max_attempts}"
                )
        self._known.add(queue)
        return bool(made)

    def _check_exists(self, queue: str) -> None:
        if queue in self._known:
            return
        check_queue_name(queue)
        if not self.db.rows("SELECT 1 FROM queue_queues WHERE name = ?", (queue,)):
            raise NotFound(f"queue {queue!r} does not exist (create it: shipyard queue create)")
        self._known.add(queue)

    def names(self) -> list[str]:
        return [r[0] for r in self.db.rows("SELECT name FROM queue_queues ORDER BY name")]

    # Producing

    def enqueue(
        self,
        queue: str,
        payload: Any,
        *,
        key: str | None = None,
        priority: int = 0,
        delay: float = 0.0,
        max_attempts: int | None = None,
    ) -> tuple[int, bool]:
        """Add an item; return (its id, whether it is new). An item whose `key` is already in
        the queue is not added again (it is an error if its payload differs)."""
        return self.enqueue_many(
            queue,
            [payload],
            keys=None if key is None else [key],
            priority=priority,
            delay=delay,
            max_attempts=max_attempts,
        )[0]

    def enqueue_many(
        self,
        queue: str,
        payloads: Sequence[Any],
        *,
        keys: Sequence[str] | None = None,
        priority: int = 0,
        delay: float = 0.0,
        max_attempts: int | None = None,
    ) -> list[tuple[int, bool]]:
        """`enqueue` for many payloads in one transaction: all are added, or none."""
        check_queue_name(queue)
        check_int(priority, "priority", *PRIORITY_RANGE)
        check_seconds(delay, "delay", positive=False)
        if max_attempts is not None:
            check_int(max_attempts, "max attempts", 1, MAX_ATTEMPTS)
        if keys is not None and len(keys) != len(payloads):
            raise ValueError("one key per payload")
        texts = [encode_json(p, f"payload {i} for queue {queue!r}") for i, p in enumerate(payloads)]
        names = (
            [check_key(k) for k in keys]
            if keys is not None
            else [uuid.uuid4().hex for _ in payloads]
        )
        now = self.clock()
        out = []
        with self.db.transaction():
            self._check_exists(queue)
            for key, text in zip(names, texts, strict=True):
                out.append(self._insert(queue, key, text, priority, now + delay, max_attempts, now))
            if any(created for _, created in out):
                self.db.notify(CHANNEL, queue)
        return out

    def _insert(
        self,
        queue: str,
        key: str,
        payload: str,
        priority: int,
        not_before: float,
        max_attempts: int | None,
        now: float,
    ) -> tuple[int, bool]:
        rows = self.db.rows(
            "INSERT INTO queue_items (queue, item_key, payload, priority, not_before, state, "
            "attempts, max_attempts, lease_token, enqueued_at) "
            "SELECT name, ?, ?, ?, ?, 'ready', 0, COALESCE(?, max_attempts), 0, ? "
            "FROM queue_queues WHERE name = ? "
            "ON CONFLICT (queue, item_key) DO NOTHING RETURNING id",
            (key, payload, priority, not_before, max_attempts, now, queue),
        )
        if rows:
            return int(rows[0][0]), True
        item_id, existing = self.db.rows(
            "SELECT id, payload FROM queue_items WHERE queue = ? AND item_key = ?", (queue, key)
        )[0]
        if existing != payload:
            raise Conflict(
                f"queue {queue!r} already holds item {item_id} under key {key!r}, with another "
                "payload: a key names one piece of work"
            )
        return int(item_id), False

    # Consuming

    def claim(self, queue: str, n: int = 1, lease: float = 30.0) -> list[Item]:
        """Lease up to `n` claimable items, best first (priority, then oldest)."""
        check_queue_name(queue)
        check_int(n, "claim count", 1, MAX_CLAIM)
        check_seconds(lease, "lease", positive=True)
        now = self.clock()
        rows = leases.claim(self.db, queue, n, self.owner, now, now + lease)
        if not rows:
            self._check_exists(queue)
        return [
            Item(int(i), queue, k, listing.load(p), pr, a, m, int(t), now + lease)
            for i, k, p, pr, _, a, m, t in rows
        ]

    def heartbeat(self, item_id: int, token: int, lease: float) -> float:
        """Extend a live lease to `lease` seconds from now; return the new expiry."""
        check_seconds(lease, "lease", positive=True)
        now = self.clock()
        if not leases.extend(self.db, item_id, token, now, now + lease):
            self._refuse(item_id, token, "heartbeat", now)
        return now + lease

    def complete(
        self, item_id: int, token: int, result: Any = None, effect: Effect | None = None
    ) -> None:
        """Mark the item done with `result`. `effect(db)`, if given, runs in the same
        transaction: its writes commit if and only if this lease's completion does.

        Completing again under the same token (a retry after a lost reply) is a no-op."""
        text = encode_json(result, f"result of item {item_id}")
        now = self.clock()
        if effect is None and self.db.dialect == "postgresql":  # one statement: no BEGIN needed
            if not leases.complete(self.db, item_id, token, text, now):
                self._refuse(item_id, token, "complete", now, finished="completed")
            return
        with self.db.transaction():
            if not leases.complete(self.db, item_id, token, text, now):
                self._refuse(item_id, token, "complete", now, finished="completed")
                return
            if effect is not None:
                effect(self.db)

    def complete_many(self, done: Sequence[tuple[Item, Any]]) -> list[StaleLease]:
        """Complete several leases, each with its result, in one transaction (one statement on
        PostgreSQL). Returns the refusals: each names an item whose lease was no longer live,
        and that item was left as it was."""
        if not done:
            return []
        texts = [(i.id, i.token, encode_json(r, f"result of item {i.id}")) for i, r in done]
        now = self.clock()
        completed = leases.complete_many(self.db, texts, now)
        refused = []
        for item_id, token, _ in texts:
            if item_id not in completed:
                try:
                    self._refuse(item_id, token, "complete", now, finished="completed")
                except StaleLease as exc:
                    refused.append(exc)
        return refused

    def fail(self, item_id: int, token: int, reason: str, retry_in: float = 0.0) -> str:
        """End the lease as failed; return the item's new state: `ready` (to be retried after
        `retry_in` seconds) or `dead` (out of attempts)."""
        check_seconds(retry_in, "retry delay", positive=False)
        now = self.clock()
        state = leases.fail(self.db, item_id, token, _reason(reason), now, now + retry_in)
        if state is None:
            return self._refuse(item_id, token, "fail", now, finished="failed")
        if state == "ready":
            self.db.notify(CHANNEL, self._queue_of(item_id))
        return state

    def release(self, item_id: int, token: int, reason: str = "released by its worker") -> None:
        """Give the item back unfinished, claimable at once; the attempt is not counted."""
        now = self.clock()
        if not leases.release(self.db, item_id, token, _reason(reason), now):
            self._refuse(item_id, token, "release", now, finished="released")
            return
        self.db.notify(CHANNEL, self._queue_of(item_id))

    def wait(self, queue: str, timeout: float) -> None:
        """Block until `queue` may have claimable items or `timeout` seconds pass. PostgreSQL
        wakes at once on a notification; SQLite has none, so this is a plain sleep."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            if queue in self.db.wait(CHANNEL, left) or self.db.dialect == "sqlite":
                return

    def _refuse(
        self, item_id: int, token: int, action: str, now: float, finished: str | None = None
    ) -> str:
        """Explain why `token` could not act on the item, as `StaleLease` or `NotFound`; return
        quietly (the state) if this very lease already ended as `finished` (a retry)."""
        rows = self.db.rows(
            "SELECT i.state, i.lease_token, i.lease_owner, i.lease_expires, a.outcome "
            "FROM queue_items i LEFT JOIN queue_attempts a ON a.item_id = i.id AND a.token = ? "
            "WHERE i.id = ?",
            (token, item_id),
        )
        if not rows:
            raise NotFound(f"queue item {item_id} does not exist")
        state, current, owner, expires, outcome = rows[0]
        if finished is not None and outcome == finished:
            return str(state)
        why = f"cannot {action} item {item_id} under lease token {token}: "
        if outcome is None and current == token and state == "leased":
            why += f"the lease expired {now - expires:.1f} s ago"
        elif current != token and state == "leased":
            why += f"the item is now leased under token {current} by {owner}"
        else:
            why += f"the lease ended ({outcome or 'superseded'}) and the item is {state}"
        raise StaleLease(why + "; nothing was changed")

    def _queue_of(self, item_id: int) -> str:
        return str(self.db.rows("SELECT queue FROM queue_items WHERE id = ?", (item_id,))[0][0])

    # Reading and repair

    def get(self, item_id: int) -> ItemRecord:
        return listing.get(self.db, item_id)

    def items(self, queue: str, state: str | None = None, limit: int = 100) -> list[ItemRecord]:
        self._check_exists(queue)
        return listing.items(self.db, queue, state, check_int(limit, "limit", 1, 100_000))

    def dead(self, queue: str, limit: int = 100) -> list[ItemRecord]:
        """Dead-lettered items, each with the history of its attempts."""
        return [self.get(r.id) for r in self.items(queue, "dead", limit)]

    def requeue(self, queue: str, item_ids: Iterable[int] | None = None) -> int:
        """Make dead items of `queue` (all, or those named) claimable again with fresh attempts;
        their history is kept. Returns how many moved."""
        self._check_exists(queue)
        ids = None if item_ids is None else sorted(set(item_ids))
        with self.db.transaction():
            moved = listing.requeue(self.db, queue, ids, self.clock())
            if moved:
                self.db.notify(CHANNEL, queue)
        return moved

    def stats(self, queue: str | None = None) -> list[QueueStats]:
        if queue is not None:
            self._check_exists(queue)
        return listing.stats(self.db, queue, self.clock())


def _reason(text: str) -> str:
    text = str(text)
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 1] + "…"
