"""Database URLs, and what a caller sees when the server is down or restarts."""

from pathlib import Path

import pytest

from shipyard.db import Database, DatabaseUnavailable, database_url, parse_url
from shipyard.db.cluster import Cluster
from shipyard.errors import InvalidInput


def test_the_default_is_the_sqlite_file_under_home(
    shipyard_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SHIPYARD_DB", raising=False)
    assert database_url() == f"sqlite://{shipyard_home / 'catalog.db'}"
    assert parse_url(database_url()).path == shipyard_home / "catalog.db"
    assert parse_url("sqlite:////srv/x.db").path == Path("/srv/x.db")
    monkeypatch.setenv("SHIPYARD_DB", "postgresql://db.example/shipyard")
    assert parse_url(database_url()).dialect == "postgresql"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("mysql://h/db", "unknown scheme 'mysql'"),
        ("sqlite://relative/x.db", "three slashes"),
        ("", "empty"),
    ],
)
def test_a_url_shipyard_cannot_use_is_refused_by_name(text: str, why: str) -> None:
    with pytest.raises(InvalidInput, match=why):
        parse_url(text)


def test_messages_never_show_the_password() -> None:
    url = parse_url("postgresql://alice:s3cret@db.example:5432/shipyard")
    assert "s3cret" not in url.shown
    assert url.shown == "postgresql://alice:***@db.example:5432/shipyard"


def test_an_unreachable_server_is_a_clear_error() -> None:
    with pytest.raises(DatabaseUnavailable, match=r"cannot connect to database .*127\.0\.0\.1:1/"):
        Database("postgresql://nobody@127.0.0.1:1/none")


def test_a_restarted_server_is_reconnected_on_the_next_statement(pg_cluster: Cluster) -> None:
    db = Database(pg_cluster.create_database())
    db.run("CREATE TABLE t (x INTEGER)")
    pg_cluster.restart()
    with pytest.raises(DatabaseUnavailable, match="is unreachable"):
        db.run("INSERT INTO t VALUES (1)")
    db.run("INSERT INTO t VALUES (2)")  # a retry connects afresh
    assert db.rows("SELECT x FROM t") == [(2,)]


def test_rows_come_as_tuples_or_as_records_by_column_name(db_url: str) -> None:
    db = Database(db_url)
    db.run("CREATE TABLE t (x INTEGER, label TEXT)")
    db.run_many("INSERT INTO t VALUES (?, ?)", [(1, "a"), (2, "b")])
    assert db.rows("SELECT x, label FROM t WHERE x > :low ORDER BY x", {"low": 0}) == [
        (1, "a"),
        (2, "b"),
    ]
    assert db.records("SELECT x, label FROM t WHERE x = ?", (2,)) == [{"x": 2, "label": "b"}]


def test_a_failed_statement_rolls_its_transaction_back(db_url: str) -> None:
    db = Database(db_url)
    db.run("CREATE TABLE t (x INTEGER PRIMARY KEY)")
    with pytest.raises(RuntimeError), db.transaction():
        db.run("INSERT INTO t VALUES (1)")
        raise RuntimeError("caller gave up")
    assert db.rows("SELECT x FROM t") == []
