"""Reading items, their history and per-queue counts; requeueing dead letters."""

import json
from typing import Any

from shipyard.db import Database
from shipyard.errors import InvalidInput, NotFound
from shipyard.queue.model import STATES, Attempt, ItemRecord, QueueStats

_ITEM = (
    "id, queue, item_key, payload, priority, state, attempts, max_attempts, not_before, "
    "lease_owner, lease_expires, result, enqueued_at, finished_at"
)


def load(text: str | None) -> Any:
    """A payload or result as stored (canonical JSON written by the queue itself)."""
    return None if text is None else json.loads(text)


def _record(row: tuple[Any, ...], history: tuple[Attempt, ...] = ()) -> ItemRecord:
    i, q, k, payload, pr, state, a, m, nb, owner, expires, result, enq, fin = row
    return ItemRecord(
        int(i),
        q,
        k,
        load(payload),
        pr,
        state,
        a,
        m,
        nb,
        owner,
        expires,
        load(result),
        enq,
        fin,
        history,
    )


def get(db: Database, item_id: int) -> ItemRecord:
    rows = db.rows(f"SELECT {_ITEM} FROM queue_items WHERE id = ?", (item_id,))
    if not rows:
        raise NotFound(f"queue item {item_id} does not exist")
    history = db.rows(
        "SELECT attempt, token, owner, claimed_at, ended_at, outcome, reason "
        "FROM queue_attempts WHERE item_id = ? ORDER BY token",
        (item_id,),
    )
    return _record(rows[0], tuple(Attempt(*h) for h in history))


def items(db: Database, queue: str, state: str | None, limit: int) -> list[ItemRecord]:
    query, params = f"SELECT {_ITEM} FROM queue_items WHERE queue = ?", [queue]
    if state is not None:
        if state not in STATES:
            raise InvalidInput(f"item state {state!r}: use one of {', '.join(STATES)}")
        query, params = query + " AND state = ?", [*params, state]
    return [_record(r) for r in db.rows(query + " ORDER BY id LIMIT ?", [*params, limit])]


def requeue(db: Database, queue: str, ids: list[int] | None, now: float) -> int:
    query = (
        "UPDATE queue_items SET state = 'ready', attempts = 0, not_before = ?, "
        "finished_at = NULL WHERE queue = ? AND state = 'dead'"
    )
    params: list[Any] = [now, queue]
    if ids is not None:
        if not ids:
            return 0
        query += f" AND id IN ({', '.join('?' * len(ids))})"
        params += ids
    return db.run(query, params)


def stats(db: Database, queue: str | None, now: float) -> list[QueueStats]:
    where, params = ("WHERE q.name = ?", [now, now, now, queue]) if queue else ("", [now] * 3)
    rows = db.rows(
        f"""
        SELECT q.name,
            SUM(CASE WHEN i.state = 'ready' AND i.not_before <= ? THEN 1 ELSE 0 END),
            SUM(CASE WHEN i.state = 'ready' AND i.not_before > ? THEN 1 ELSE 0 END),
            SUM(CASE WHEN i.state = 'leased' THEN 1 ELSE 0 END),
            SUM(CASE WHEN i.state = 'done' THEN 1 ELSE 0 END),
            SUM(CASE WHEN i.state = 'dead' THEN 1 ELSE 0 END),
            MIN(CASE WHEN i.state = 'ready' AND i.not_before <= ? THEN i.not_before END)
        FROM queue_queues q LEFT JOIN queue_items i ON i.queue = q.name {where}
        GROUP BY q.name ORDER BY q.name
        """,
        params,
    )
    attempts = dict(
        ((name, outcome), count)
        for name, outcome, count in db.rows(
            "SELECT i.queue, a.outcome, COUNT(*) FROM queue_attempts a "
            "JOIN queue_items i ON i.id = a.item_id GROUP BY i.queue, a.outcome"
        )
    )
    out = []
    for name, ready, waiting, leased, done, dead, oldest in rows:
        claims = sum(c for (q, _), c in attempts.items() if q == name)
        out.append(
            QueueStats(
                name,
                int(ready or 0),
                int(waiting or 0),
                int(leased or 0),
                int(done or 0),
                int(dead or 0),
                max(0.0, now - oldest) if oldest is not None else 0.0,
                int(claims),
                int(attempts.get((name, "completed"), 0)),
            )
        )
    return out
