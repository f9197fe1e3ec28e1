"""The run's desired and observed state, in the trainer's own tables of Shipyard's database.

`train_runs` holds one row per run: its state-machine state, config, world size, attempt, latest
committed checkpoint step, skip windows, learning-rate scale, the live ranks' pids and start
times, the heartbeat port and the goodput ledger, so a restarted controller re-attaches from it.
`train_events` is the run's log (failures, hangs with their stacks, stragglers, rollbacks, chaos,
restarts), in time order.
"""

import json
import time
from dataclasses import dataclass, field
from typing import Any

from shipyard.db import Database, Dialect, Schema, ensure, open_database
from shipyard.errors import InvalidInput, NotFound

STATES = ("pending", "starting", "running", "restarting", "succeeded", "failed")
FINAL = ("succeeded", "failed")


def _v1(dialect: Dialect) -> str:
    # `IF NOT EXISTS`: a database made before versioning already has these tables.
    return """
CREATE TABLE IF NOT EXISTS train_runs (
    run_id          TEXT PRIMARY KEY,
    state           TEXT NOT NULL,
    config          TEXT NOT NULL,
    world_size      INTEGER NOT NULL,
    run_dir         TEXT NOT NULL,
    data_path       TEXT NOT NULL,
    attempt         INTEGER NOT NULL DEFAULT 0,
    checkpoint_step BIGINT NOT NULL DEFAULT 0,
    step            BIGINT NOT NULL DEFAULT 0,
    skips           TEXT NOT NULL DEFAULT '[]',
    lr_scale        DOUBLE PRECISION NOT NULL DEFAULT 1.0,
    rank_pids       TEXT NOT NULL DEFAULT '[]',
    heartbeat_port  INTEGER NOT NULL DEFAULT 0,
    controller_pid  INTEGER NOT NULL DEFAULT 0,
    ledger          TEXT NOT NULL DEFAULT '{}',
    reason          TEXT NOT NULL DEFAULT '',
    model_id        TEXT NOT NULL DEFAULT '',
    started_at      DOUBLE PRECISION NOT NULL,
    updated_at      DOUBLE PRECISION NOT NULL
);
CREATE TABLE IF NOT EXISTS train_events (
    run_id TEXT NOT NULL,
    at     DOUBLE PRECISION NOT NULL,
    kind   TEXT NOT NULL,
    detail TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS train_events_run ON train_events (run_id, at)
"""


TRAIN = Schema("train", (_v1,))


@dataclass
class TrainRun:
    run_id: str
    state: str
    config: dict[str, Any]
    world_size: int
    run_dir: str
    data_path: str
    attempt: int = 0
    checkpoint_step: int = 0
    step: int = 0
    skips: list[list[int]] = field(default_factory=list)
    lr_scale: float = 1.0
    rank_pids: list[list[int]] = field(default_factory=list)  # [pid, start time] (train/procid)
    heartbeat_port: int = 0
    controller_pid: int = 0
    ledger: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    model_id: str = ""
    started_at: float = 0.0
    updated_at: float = 0.0


_JSON = ("config", "skips", "rank_pids", "ledger")


@dataclass(frozen=True)
class Event:
    at: float
    kind: str
    detail: dict[str, Any]


class RunTable:
    """The trainer's tables, through one connection: use one `RunTable` per thread."""

    def __init__(self, db: Database | None = None) -> None:
        self.db = db or open_database()
        ensure(self.db, TRAIN)

    def close(self) -> None:
        self.db.close()

    def create(self, run: TrainRun) -> None:
        run.started_at = run.updated_at = time.time()
        row = self._row(run)
        marks = ", ".join("?" for _ in row)
        self.db.run(
            f"INSERT INTO train_runs ({', '.join(row)}) VALUES ({marks})", list(row.values())
        )

    def save(self, run: TrainRun) -> None:
        if run.state not in STATES:
            raise InvalidInput(f"unknown train run state {run.state!r}; allowed: {STATES}")
        run.updated_at = time.time()
        row = self._row(run)
        del row["run_id"]
        sets = ", ".join(f"{name} = ?" for name in row)
        self.db.run(f"UPDATE train_runs SET {sets} WHERE run_id = ?", [*row.values(), run.run_id])

    def get(self, run_id: str) -> TrainRun:
        rows = self.db.records("SELECT * FROM train_runs WHERE run_id = ?", (run_id,))
        if not rows:
            raise NotFound(f"no training run {run_id!r} in {self.db}")
        values = rows[0]
        for name in _JSON:
            values[name] = json.loads(values[name])
        return TrainRun(**values)

    def event(self, run_id: str, what: str, **detail: Any) -> None:
        self.db.run(
            "INSERT INTO train_events (run_id, at, kind, detail) VALUES (?, ?, ?, ?)",
            (run_id, time.time(), what, json.dumps(detail, default=str)),
        )

    def events(self, run_id: str, kind: str | None = None) -> list[Event]:
        query = "SELECT at, kind, detail FROM train_events WHERE run_id = ?"
        args: list[Any] = [run_id]
        if kind:
            query += " AND kind = ?"
            args.append(kind)
        rows = self.db.rows(query + " ORDER BY at", args)
        return [Event(at, k, json.loads(detail)) for at, k, detail in rows]

    @staticmethod
    def _row(run: TrainRun) -> dict[str, Any]:
        row = dict(run.__dict__)
        for name in _JSON:
            row[name] = json.dumps(row[name])
        return row
