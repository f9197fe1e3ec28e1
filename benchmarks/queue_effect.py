"""A `shipyard queue worker` command with an external side effect: a row in a SQLite file
outside the queue's database, per run of the command. Used by queue_chaos.py and the tests.

    shipyard queue worker Q -- python benchmarks/queue_effect.py EFFECTS.db [--fenced] [--go F]

Unfenced, every run that gets to the end writes its row: at least once per item. Fenced, the
command keeps the newest lease token it saw per item key (`$SHIPYARD_LEASE_TOKEN`) and refuses
to work under an older one, and writes the effect only if the key has none yet, both checks in
the effect's own transaction: exactly once per key. The payload's "ms" is how long the work
takes; with `--go F` the work waits for file F to exist instead (the tests' go signal).
"""

import argparse
import json
import os
import sqlite3
import sys
import time
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS effects (key TEXT NOT NULL, token INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS fence (key TEXT PRIMARY KEY, token INTEGER NOT NULL);
"""


def connect(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=120, isolation_level=None)
    db.executescript(SCHEMA)
    return db


def stale(db: sqlite3.Connection, key: str, token: int) -> bool:
    """Inside a write transaction: a newer lease of `key` was seen; else note `token` as seen."""
    row = db.execute("SELECT token FROM fence WHERE key = ?", (key,)).fetchone()
    if row is not None and row[0] > token:
        return True
    db.execute("INSERT OR REPLACE INTO fence VALUES (?, ?)", (key, token))
    return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("effects", help="the SQLite file the effects go to")
    parser.add_argument("--fenced", action="store_true", help="refuse stale leases' work")
    parser.add_argument("--go", type=Path, help="work until this file exists")
    args = parser.parse_args()
    key, token = os.environ["SHIPYARD_ITEM_KEY"], int(os.environ["SHIPYARD_LEASE_TOKEN"])
    payload = json.load(sys.stdin)
    db = connect(args.effects)
    if args.fenced:
        db.execute("BEGIN IMMEDIATE")
        refused = stale(db, key, token)
        db.execute("COMMIT")
        if refused:
            print(f"lease token {token} of {key} is stale", file=sys.stderr)
            return 3
    if args.go is not None:
        while not args.go.exists():
            time.sleep(0.02)
    else:
        time.sleep(payload.get("ms", 0) / 1000)
    db.execute("BEGIN IMMEDIATE")
    if args.fenced:
        if stale(db, key, token):
            db.execute("ROLLBACK")
            print(f"lease token {token} of {key} went stale while working", file=sys.stderr)
            return 3
        if db.execute("SELECT 1 FROM effects WHERE key = ?", (key,)).fetchone():
            db.execute("ROLLBACK")
            print(json.dumps({"effect": "already done"}))
            return 0
    db.execute("INSERT INTO effects VALUES (?, ?)", (key, token))
    db.execute("COMMIT")
    print(json.dumps({"effect": token}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
