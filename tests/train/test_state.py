"""The trainer's run state in Shipyard's database: every test runs on SQLite and on a real
PostgreSQL server (the `db_url` fixture)."""

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from shipyard.db import Database, version
from shipyard.errors import InvalidInput, NotFound
from shipyard.train.state import TRAIN, RunTable, TrainRun
from shipyard.workspace import Workspace

from .conftest import make_config, train

if TYPE_CHECKING:
    from shipyard.db.cluster import Cluster


@pytest.fixture
def table(db_url: str) -> Iterator[RunTable]:
    runs = RunTable(Database(db_url))
    yield runs
    runs.close()


def new_run(run_id: str = "r1") -> TrainRun:
    return TrainRun(run_id, "pending", {"train": {"steps": 10}}, 2, "/runs/r1", "/data", -1)


def test_a_run_keeps_every_field_it_was_saved_with(table: RunTable) -> None:
    table.create(new_run())
    run = table.get("r1")
    assert (run.state, run.config, run.world_size, run.attempt) == (
        "pending", {"train": {"steps": 10}}, 2, -1
    )  # fmt: skip
    assert run.started_at == run.updated_at > 0
    run.state, run.step, run.attempt, run.lr_scale = "running", 3_000_000_000, 2, 0.125
    run.skips = [[100, 120]]
    run.rank_pids = [[4242, 1234.5], [4243, 1234.75]]
    run.ledger = {"productive_s": 12.5, "lost": {"restart": 1.25}}
    run.reason, run.model_id, run.heartbeat_port = "ok", "m" * 64, 40123
    table.save(run)
    again = table.get("r1")
    assert again == run  # floats to full precision, a step past 2**31, the JSON fields


def test_unknown_runs_and_states_are_refused(table: RunTable) -> None:
    with pytest.raises(NotFound, match="no training run 'nope' in database"):
        table.get("nope")
    table.create(new_run())
    run = table.get("r1")
    run.state = "exploded"
    with pytest.raises(InvalidInput, match="unknown train run state 'exploded'"):
        table.save(run)
    assert table.get("r1").state == "pending"


def test_events_come_back_in_order_and_by_kind(table: RunTable) -> None:
    table.create(new_run("r1"))
    table.create(new_run("r2"))
    table.event("r1", "launch", attempt=0, pids=[1, 2])
    table.event("r2", "launch", attempt=0)
    table.event("r1", "failure", kind="crash", rank=Path("/not/json"))  # default=str
    table.event("r1", "launch", attempt=1)
    events = table.events("r1")
    assert [e.kind for e in events] == ["launch", "failure", "launch"]
    assert events[1].detail == {"kind": "crash", "rank": "/not/json"}
    assert [e.detail["attempt"] for e in table.events("r1", "launch")] == [0, 1]
    assert [e.at for e in events] == sorted(e.at for e in events)
    assert table.events("r3") == []


def test_the_default_table_is_the_configured_database(
    db_url: str, shipyard_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHIPYARD_DB", db_url)
    default = RunTable()
    default.create(new_run())
    default.close()
    assert RunTable(Database(db_url)).get("r1").state == "pending"
    assert version(Database(db_url), TRAIN) == TRAIN.latest


# The trainer's tables as Shipyard made them before versioning (REAL columns, no version row).
UNVERSIONED = """
CREATE TABLE train_runs (
    run_id TEXT PRIMARY KEY, state TEXT NOT NULL, config TEXT NOT NULL,
    world_size INTEGER NOT NULL, run_dir TEXT NOT NULL, data_path TEXT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 0, checkpoint_step INTEGER NOT NULL DEFAULT 0,
    step INTEGER NOT NULL DEFAULT 0, skips TEXT NOT NULL DEFAULT '[]',
    lr_scale REAL NOT NULL DEFAULT 1.0, rank_pids TEXT NOT NULL DEFAULT '[]',
    heartbeat_port INTEGER NOT NULL DEFAULT 0, controller_pid INTEGER NOT NULL DEFAULT 0,
    ledger TEXT NOT NULL DEFAULT '{}', reason TEXT NOT NULL DEFAULT '',
    model_id TEXT NOT NULL DEFAULT '', started_at REAL NOT NULL, updated_at REAL NOT NULL
);
CREATE TABLE train_events (run_id TEXT NOT NULL, at REAL NOT NULL, kind TEXT NOT NULL,
                           detail TEXT NOT NULL);
CREATE INDEX train_events_run ON train_events (run_id, at)
"""


def test_a_catalog_file_from_before_versioning_keeps_its_runs(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'catalog.db'}"
    old = Database(url)
    for statement in UNVERSIONED.split(";"):
        old.run(statement)
    old.run(
        "INSERT INTO train_runs (run_id, state, config, world_size, run_dir, data_path, "
        "started_at, updated_at) VALUES ('old', 'succeeded', '{}', 1, '/r', '/d', 1.5, 2.5)"
    )
    old.run("INSERT INTO train_events VALUES ('old', 2.0, 'state', '{\"state\": \"succeeded\"}')")
    table = RunTable(Database(url))
    assert (table.get("old").state, table.get("old").updated_at) == ("succeeded", 2.5)
    assert [e.detail for e in table.events("old")] == [{"state": "succeeded"}]
    assert version(old, TRAIN) == 1


def test_a_run_keeps_all_its_state_on_postgresql(
    pg_cluster: "Cluster", token_data: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Controller, ranks and catalog on one PostgreSQL database, nothing in a SQLite file."""
    monkeypatch.setenv("SHIPYARD_DB", pg_cluster.create_database())
    run_id, state = train(make_config(token_data, train={"steps": 10, "checkpoint_every": 5}))
    assert state == "succeeded"
    table = RunTable()
    try:
        run = table.get(run_id)
        assert (run.step, run.checkpoint_step) == (10, 10) and run.model_id
        assert [e.detail["state"] for e in table.events(run_id, "state")][-1] == "succeeded"
    finally:
        table.close()
    ws = Workspace.open()
    try:
        assert ws.catalog.get_artifact(run.model_id) is not None
    finally:
        ws.close()
    assert not (home / "catalog.db").exists()
