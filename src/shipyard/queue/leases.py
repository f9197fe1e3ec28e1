"""The statements that move leases, per engine.

PostgreSQL: each operation is one statement (data-modifying CTEs), so a claim of a batch is one
round trip: expired leases are closed (their items back to ready, or dead when out of attempts),
and `FOR UPDATE SKIP LOCKED` picks ready items from the partial index so concurrent claimers
never wait on, or take, each other's rows. (An item made ready by that statement is not visible
to it, so when a short claim freed some, it claims once more.) SQLite has one writer at a time,
so the same steps run as a few statements inside one `BEGIN IMMEDIATE`; the claim itself is
one `UPDATE ... RETURNING`.

Every statement that acts under a lease checks `lease_token` and `lease_expires` in its WHERE:
a stale or expired lease matches no row, so it changes nothing.
"""

from typing import Any

from shipyard.db import Database

Row = tuple[Any, ...]
CLAIMED = "id, item_key, payload, priority, not_before, attempts, max_attempts, lease_token"
_HELD = "id = :id AND state = 'leased' AND lease_token = :token AND lease_expires > :now"
_LEAVE = "UPDATE queue_attempts SET outcome = :outcome, reason = :reason, ended_at = :now"
_OUT_OF_ATTEMPTS = "attempts >= max_attempts"

_EXPIRE_ITEMS = f"""
    UPDATE queue_items SET
        state = CASE WHEN {_OUT_OF_ATTEMPTS} THEN 'dead' ELSE 'ready' END,
        finished_at = CASE WHEN {_OUT_OF_ATTEMPTS} THEN :now END,
        lease_expires = NULL
"""
_EXPIRED = "queue = :queue AND state = 'leased' AND lease_expires <= :now"
_CLAIM_ITEMS = """
    UPDATE queue_items SET state = 'leased', attempts = attempts + 1,
        lease_token = lease_token + 1, lease_owner = :owner, lease_expires = :expires
"""
_READY = """
    SELECT id FROM queue_items WHERE queue = :queue AND state = 'ready' AND not_before <= :now
    ORDER BY priority DESC, not_before, id LIMIT :n
"""
_OPEN_ATTEMPT = "INSERT INTO queue_attempts (item_id, token, attempt, owner, claimed_at)"

_PG_CLAIM = f"""
WITH expired AS (
    {_EXPIRE_ITEMS}
    WHERE id IN (SELECT id FROM queue_items WHERE {_EXPIRED} FOR UPDATE SKIP LOCKED)
    RETURNING id, lease_token, state
), closed AS (
    UPDATE queue_attempts a SET outcome = 'expired', reason = 'lease expired', ended_at = :now
    FROM expired e WHERE a.item_id = e.id AND a.token = e.lease_token
), claimed AS (
    {_CLAIM_ITEMS}
    WHERE id IN ({_READY} FOR UPDATE SKIP LOCKED)
    RETURNING {CLAIMED}
), opened AS (
    {_OPEN_ATTEMPT} SELECT id, lease_token, attempts, :owner, :now FROM claimed
)
SELECT {CLAIMED}, FALSE FROM claimed
UNION ALL
SELECT id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, TRUE FROM expired WHERE state = 'ready'
"""


def claim(db: Database, queue: str, n: int, owner: str, now: float, expires: float) -> list[Row]:
    """Lease up to `n` ready items of `queue` to `owner` until `expires`."""
    params = {"queue": queue, "n": n, "owner": owner, "now": now, "expires": expires}
    if db.dialect == "sqlite":
        rows = _claim_sqlite(db, params)
    else:
        got = db.rows(_PG_CLAIM, params)
        rows = [r[:-1] for r in got if not r[-1]]
        if len(rows) < n and len(rows) < len(got):  # expired leases freed items: take them too
            rows += [r[:-1] for r in db.rows(_PG_CLAIM, params | {"n": n - len(rows)})]
    return sorted(rows, key=lambda r: (-r[3], r[4], r[0]))  # RETURNING keeps no order


def _claim_sqlite(db: Database, params: dict[str, Any]) -> list[Row]:
    queue, owner, now = params["queue"], params["owner"], params["now"]
    with db.transaction():
        db.run(
            "UPDATE queue_attempts SET outcome = 'expired', reason = 'lease expired', "
            "ended_at = :now WHERE outcome IS NULL AND (item_id, token) IN "
            f"(SELECT id, lease_token FROM queue_items WHERE {_EXPIRED})",
            {"queue": queue, "now": now},
        )
        db.run(f"{_EXPIRE_ITEMS} WHERE {_EXPIRED}", {"queue": queue, "now": now})
        rows = db.rows(f"{_CLAIM_ITEMS} WHERE id IN ({_READY}) RETURNING {CLAIMED}", params)
        db.run_many(
            f"{_OPEN_ATTEMPT} VALUES (?, ?, ?, ?, ?)",
            [(r[0], r[7], r[5], owner, now) for r in rows],
        )
    return rows


def complete(db: Database, item_id: int, token: int, result: str, now: float) -> bool:
    """Mark the item done with `result` if `token` holds its live lease. Call inside a
    transaction when other writes must commit with it."""
    params = {"id": item_id, "token": token, "now": now, "result": result}
    done = (
        f"UPDATE queue_items SET state = 'done', result = :result, finished_at = :now, "
        f"lease_expires = NULL WHERE {_HELD}"
    )
    closing = {"outcome": "completed", "reason": None}
    if db.dialect == "postgresql":
        rows = db.rows(
            f"WITH done AS ({done} RETURNING id), closed AS ({_LEAVE} "
            "WHERE item_id IN (SELECT id FROM done) AND token = :token) SELECT id FROM done",
            params | closing,
        )
        return bool(rows)
    if not db.run(done, params):
        return False
    _close_attempt(db, item_id, token, now, "completed", None)
    return True


def complete_many(db: Database, done: list[tuple[int, int, str]], now: float) -> set[int]:
    """`complete` for many (id, token, result) at once, in one transaction (on PostgreSQL one
    statement); returns the ids completed."""
    if db.dialect == "sqlite":
        with db.transaction():
            return {i for i, token, result in done if complete(db, i, token, result, now)}
    ids, tokens, results = (list(column) for column in zip(*done, strict=True))
    rows = db.rows(
        "WITH input AS (SELECT * FROM unnest(:ids::bigint[], :tokens::bigint[], "
        ":results::text[]) AS t (id, token, result)), "
        "done AS (UPDATE queue_items q SET state = 'done', result = input.result, "
        "finished_at = :now, lease_expires = NULL FROM input WHERE q.id = input.id "
        "AND q.state = 'leased' AND q.lease_token = input.token AND q.lease_expires > :now "
        "RETURNING q.id, q.lease_token), "
        "closed AS (UPDATE queue_attempts a SET outcome = 'completed', ended_at = :now "
        "FROM done WHERE a.item_id = done.id AND a.token = done.lease_token) "
        "SELECT id FROM done",
        {"ids": ids, "tokens": tokens, "results": results, "now": now},
    )
    return {int(r[0]) for r in rows}


def fail(
    db: Database, item_id: int, token: int, reason: str, now: float, not_before: float
) -> str | None:
    """End the lease as failed: the item is ready again at `not_before`, or dead when out of
    attempts. Returns the new state, or None when `token` does not hold a live lease."""
    with db.transaction():
        rows = db.rows(
            f"UPDATE queue_items SET state = CASE WHEN {_OUT_OF_ATTEMPTS} THEN 'dead' "
            f"ELSE 'ready' END, finished_at = CASE WHEN {_OUT_OF_ATTEMPTS} THEN :now END, "
            f"not_before = :not_before, lease_expires = NULL WHERE {_HELD} RETURNING state",
            {"id": item_id, "token": token, "now": now, "not_before": not_before},
        )
        if rows:
            _close_attempt(db, item_id, token, now, "failed", reason)
    return str(rows[0][0]) if rows else None


def release(db: Database, item_id: int, token: int, reason: str, now: float) -> bool:
    """Give the item back unfinished; the attempt does not count against its limit."""
    with db.transaction():
        changed = db.run(
            "UPDATE queue_items SET state = 'ready', attempts = attempts - 1, not_before = :now, "
            f"lease_expires = NULL WHERE {_HELD}",
            {"id": item_id, "token": token, "now": now},
        )
        if changed:
            _close_attempt(db, item_id, token, now, "released", reason)
    return bool(changed)


def extend(db: Database, item_id: int, token: int, now: float, expires: float) -> bool:
    """Move a live lease's expiry to `expires` (a heartbeat)."""
    return bool(
        db.run(
            f"UPDATE queue_items SET lease_expires = :expires WHERE {_HELD}",
            {"id": item_id, "token": token, "now": now, "expires": expires},
        )
    )


def _close_attempt(
    db: Database, item_id: int, token: int, now: float, outcome: str, reason: str | None
) -> None:
    db.run(
        f"{_LEAVE} WHERE item_id = :id AND token = :token",
        {"id": item_id, "token": token, "now": now, "outcome": outcome, "reason": reason},
    )
