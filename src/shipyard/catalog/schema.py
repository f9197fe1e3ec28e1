"""The catalog's tables, as versioned steps (see `shipyard.db.migrate`).

Version 1 is the schema the catalog had before versioning, written with `IF NOT EXISTS`, so a
database made by an older Shipyard takes it as a no-op and is then marked version 1.
"""

from shipyard.db import SERIAL_KEY, Dialect, Schema


def _v1(dialect: Dialect) -> str:
    return f"""
CREATE TABLE IF NOT EXISTS artifacts (
    id          TEXT PRIMARY KEY,
    kind        TEXT NOT NULL,
    size        BIGINT NOT NULL,
    file_count  INTEGER NOT NULL,
    created_at  DOUBLE PRECISION NOT NULL,
    run_id      TEXT,
    metadata    TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS artifacts_kind ON artifacts (kind);

CREATE TABLE IF NOT EXISTS aliases (
    name        TEXT PRIMARY KEY,
    artifact_id TEXT NOT NULL REFERENCES artifacts (id),
    updated_at  DOUBLE PRECISION NOT NULL
);

CREATE TABLE IF NOT EXISTS alias_history (
    seq         {SERIAL_KEY[dialect]},
    name        TEXT NOT NULL,
    old_id      TEXT,
    new_id      TEXT NOT NULL,
    at          DOUBLE PRECISION NOT NULL,
    by_whom     TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS alias_history_name ON alias_history (name, seq);

CREATE TABLE IF NOT EXISTS runs (
    id           TEXT PRIMARY KEY,
    kind         TEXT NOT NULL,
    status       TEXT NOT NULL,
    started_at   DOUBLE PRECISION NOT NULL,
    ended_at     DOUBLE PRECISION,
    config_hash  TEXT NOT NULL,
    code_version TEXT NOT NULL,
    user_name    TEXT NOT NULL,
    config       TEXT NOT NULL
);

-- Lineage: artifact -> run (the run consumed it), run -> artifact (the run produced it).
CREATE TABLE IF NOT EXISTS edges (
    parent TEXT NOT NULL,
    child  TEXT NOT NULL,
    PRIMARY KEY (parent, child)
);
CREATE INDEX IF NOT EXISTS edges_child ON edges (child)
"""


CATALOG = Schema("catalog", (_v1,))
