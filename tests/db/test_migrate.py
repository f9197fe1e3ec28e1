"""Versioned schemas: from an empty database, from the catalog made before versioning, and a
database newer than this code refused by name. Each runs on SQLite and on PostgreSQL."""

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from shipyard.catalog import ArtifactRecord, open_catalog
from shipyard.catalog.schema import CATALOG
from shipyard.db import Database, Schema, SchemaTooNew, ensure, upgrade, version


def test_an_empty_database_is_brought_to_the_latest_version(db_url: str) -> None:
    db = Database(db_url)
    assert version(db, CATALOG) == 0
    assert upgrade(db, [CATALOG]) == [("catalog", 0, CATALOG.latest)]
    assert version(db, CATALOG) == CATALOG.latest
    assert db.has_table("artifacts") and db.has_table("alias_history")
    assert upgrade(db, [CATALOG]) == [("catalog", CATALOG.latest, CATALOG.latest)]  # a no-op


def test_a_catalog_made_before_versioning_keeps_its_records(db_url: str) -> None:
    """The tables exist (the old code made them with the same DDL) but no version is recorded:
    version 1 applies as a no-op and the records survive."""
    db = Database(db_url)
    for statement in CATALOG.steps[0](db.dialect).split(";"):
        if statement.strip():
            db.run(statement)
    db.run(
        "INSERT INTO artifacts VALUES (?, 'model', 1, 1, ?, NULL, '{}')", ("a" * 64, time.time())
    )
    assert not db.has_table("shipyard_schema")
    catalog = open_catalog(db_url)
    assert [a.id for a in catalog.list_artifacts()] == ["a" * 64]
    assert version(db, CATALOG) == CATALOG.latest


def test_a_later_step_runs_once_on_a_database_at_the_previous_version(db_url: str) -> None:
    db = Database(db_url)
    v1 = Schema("demo", (lambda d: "CREATE TABLE demo (x INTEGER)",))
    v2 = Schema("demo", (*v1.steps, lambda d: "ALTER TABLE demo ADD COLUMN y INTEGER"))
    assert ensure(db, v1) == 0
    db.run("INSERT INTO demo (x) VALUES (1)")
    assert ensure(db, v2) == 1
    assert ensure(db, v2) == 2
    assert db.rows("SELECT x, y FROM demo") == [(1, None)]


def test_a_schema_newer_than_this_code_is_refused_by_name(db_url: str) -> None:
    catalog = open_catalog(db_url)
    catalog.add_artifact(ArtifactRecord("b" * 64, "model", 1, 1, 0.0, None))
    db = Database(db_url)
    db.run("UPDATE shipyard_schema SET version = ? WHERE subsystem = 'catalog'", (99,))
    with pytest.raises(SchemaTooNew, match=r"catalog schema at version 99, newer than .*up to 1"):
        open_catalog(db_url)
    with pytest.raises(SchemaTooNew, match="catalog"):
        upgrade(db, [CATALOG])
    assert version(db, CATALOG) == 99
    assert db.rows("SELECT id FROM artifacts") == [("b" * 64,)]


def test_openers_racing_on_a_fresh_database_apply_each_step_once(db_url: str) -> None:
    counted = Schema(
        "counted",
        (lambda d: "CREATE TABLE counted (n INTEGER); INSERT INTO counted VALUES (1)",),
    )
    Database(db_url).close()  # the SQLite file exists before the race, as after any first use

    def open_and_ensure(_: int) -> int:
        db = Database(db_url)
        try:
            return ensure(db, counted)
        finally:
            db.close()

    with ThreadPoolExecutor(8) as pool:
        before = list(pool.map(open_and_ensure, range(8)))
    assert sorted(before) == [0] + [1] * 7
    assert Database(db_url).rows("SELECT COUNT(*) FROM counted") == [(1,)]


def test_adopt_runs_once_on_a_database_with_no_version_before_the_steps(db_url: str) -> None:
    """Tables made before versioning, in a shape step 1 cannot take alone, are adopted first."""
    db = Database(db_url)
    db.run("CREATE TABLE old (x INTEGER)")  # what an unversioned Shipyard left
    db.run("INSERT INTO old VALUES (1)")
    adopted: list[str] = []

    def adopt(d: Database) -> None:
        adopted.append("old")
        d.run("ALTER TABLE old ADD COLUMN y INTEGER")

    step = "CREATE TABLE IF NOT EXISTS old (x INTEGER, y INTEGER); CREATE INDEX old_y ON old (y)"
    schema = Schema("old", (lambda d: step,), adopt=adopt)
    assert ensure(db, schema) == 0
    assert ensure(db, schema) == 1
    assert adopted == ["old"] and db.rows("SELECT x, y FROM old") == [(1, None)]
