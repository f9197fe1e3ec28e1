"""The queue's tables, as versioned steps (see `shipyard.db.migrate`).

An item is `ready` (claimable once `not_before` has passed), `leased` (until `lease_expires`),
`done` or `dead`. `lease_token` rises by one at every claim and is never reset, so it fences:
only the holder of the newest lease can heartbeat, complete, fail or release the item. Each
claim leaves one row in `queue_attempts`, closed with its outcome and reason.
"""

from shipyard.db import SERIAL_KEY, Dialect, Schema


def _v1(dialect: Dialect) -> str:
    return f"""
CREATE TABLE queue_queues (
    name         TEXT PRIMARY KEY,
    max_attempts INTEGER NOT NULL,
    created_at   DOUBLE PRECISION NOT NULL
);
CREATE TABLE queue_items (
    id            {SERIAL_KEY[dialect]},
    queue         TEXT NOT NULL,
    item_key      TEXT NOT NULL,
    payload       TEXT NOT NULL,
    priority      INTEGER NOT NULL,
    not_before    DOUBLE PRECISION NOT NULL,
    state         TEXT NOT NULL,
    attempts      INTEGER NOT NULL,
    max_attempts  INTEGER NOT NULL,
    lease_token   BIGINT NOT NULL,
    lease_owner   TEXT,
    lease_expires DOUBLE PRECISION,
    result        TEXT,
    enqueued_at   DOUBLE PRECISION NOT NULL,
    finished_at   DOUBLE PRECISION,
    UNIQUE (queue, item_key)
);
-- The claim reads only this partial index: ready items in claim order.
CREATE INDEX queue_items_ready ON queue_items (queue, priority DESC, not_before, id)
    WHERE state = 'ready';
CREATE INDEX queue_items_leased ON queue_items (queue, lease_expires) WHERE state = 'leased';
CREATE INDEX queue_items_dead ON queue_items (queue, id) WHERE state = 'dead';
CREATE TABLE queue_attempts (
    item_id    BIGINT NOT NULL,
    token      BIGINT NOT NULL,
    attempt    INTEGER NOT NULL,
    owner      TEXT NOT NULL,
    claimed_at DOUBLE PRECISION NOT NULL,
    ended_at   DOUBLE PRECISION,
    outcome    TEXT,
    reason     TEXT,
    PRIMARY KEY (item_id, token)
)
"""


QUEUE = Schema("queue", (_v1,))
