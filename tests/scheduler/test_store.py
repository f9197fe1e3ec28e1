"""The scheduler's job store in Shipyard's database: every test runs on SQLite and on a real
PostgreSQL server (the `db_url` fixture)."""

import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from shipyard.db import Database, SchemaTooNew, upgrade, version
from shipyard.errors import InvalidInput, NotFound
from shipyard.scheduler.model import Job
from shipyard.scheduler.store import SCHEDULER, JobStore

from .live import scheduler, shipyard, wait_for


@pytest.fixture
def store(db_url: str) -> Iterator[JobStore]:
    jobs = JobStore(Database(db_url))
    yield jobs
    jobs.close()


def test_a_job_keeps_its_spec_command_and_what_the_service_wrote(store: JobStore) -> None:
    job_id = store.submit(Job("", "a", 2, 60.0, gpus_per_node=2), ["python", "-c", "print(1)"])
    row = store.get(job_id)
    assert row["state"] == "queued" and row["command"] == ["python", "-c", "print(1)"]
    assert row["spec"]["team"] == "a" and row["spec"]["gpus"] == 2
    assert row["gpus"] is None and row["condition"] is None and row["message"] == ""
    assert row["submitted"] == row["spec"]["submit_time"]  # a float, to the microsecond
    condition = {"reason": "Pending", "message": "waits for 2 GPUs", "since": 12.5}
    store.update(job_id, condition=condition, message="hello")
    store.update(job_id, state="running", started=20.25, gpus={"n0": [0, 1]})
    row = store.get(job_id)
    assert row["condition"] == condition and row["message"] == "hello"
    assert (row["state"], row["started"], row["gpus"]) == ("running", 20.25, {"n0": [0, 1]})
    store.update(job_id, state="done", finished=30.0, exit_code=0)
    assert store.get(job_id)["exit_code"] == 0


def test_listing_by_state_in_submission_order(store: JobStore) -> None:
    ids = [store.submit(Job("", "a", 1, 60.0), ["true"]) for _ in range(4)]
    store.update(ids[1], state="running")
    store.update(ids[3], state="failed")
    assert [r["id"] for r in store.list()] == ids
    assert [r["id"] for r in store.list("queued")] == [ids[0], ids[2]]
    assert [r["id"] for r in store.list("running", "failed")] == [ids[1], ids[3]]
    assert store.list("cancelled") == []


def test_cancel_by_state(store: JobStore) -> None:
    queued, running, done = (store.submit(Job("", "a", 1, 60.0), ["true"]) for _ in range(3))
    store.update(running, state="running")
    store.update(done, state="done", finished=5.0)
    assert store.cancel(queued) == "cancelled"
    assert store.get(queued)["finished"] is not None  # cancelled now: it never ran
    assert store.cancel(running) == "cancelling"  # the service stops it
    assert store.get(running)["finished"] is None
    assert store.cancel(done) == "done"  # too late: nothing changes
    assert store.get(done)["finished"] == 5.0


def test_unknown_jobs_and_empty_commands_are_refused(store: JobStore) -> None:
    with pytest.raises(NotFound, match="job 'nope' not found"):
        store.get("nope")
    with pytest.raises(NotFound, match="job 'nope' not found"):
        store.cancel("nope")
    with pytest.raises(InvalidInput, match="a command is required"):
        store.submit(Job("", "a", 1, 60.0), [])
    assert store.list() == []


@pytest.mark.filterwarnings(
    "error::ResourceWarning"
)  # a connection left open when its thread ended
def test_threads_share_a_store_each_on_its_own_connection(db_url: str) -> None:
    """The service's HTTP threads use the store the main thread made."""
    store = JobStore(Database(db_url))
    errors: list[BaseException] = []

    def submit_some() -> None:
        try:
            for _ in range(5):
                store.cancel(store.submit(Job("", "a", 1, 60.0), ["true"]))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=submit_some) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert [r["state"] for r in store.list()] == ["cancelled"] * 30
    if store.db.dialect == "postgresql":  # each thread's connection went with its thread

        def others() -> int:  # a server process ends a moment after its client closes
            query = (
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
            )
            return int(store.db.rows(query)[0][0])

        wait_for(lambda: others() == 0, limit=10)
    store.close()


def test_the_default_store_is_the_configured_database(
    db_url: str, shipyard_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHIPYARD_DB", db_url)
    job_id = JobStore().submit(Job("", "a", 1, 60.0), ["true"])
    assert JobStore(Database(db_url)).get(job_id)["state"] == "queued"
    assert version(Database(db_url), SCHEDULER) == SCHEDULER.latest


def test_db_upgrade_and_status_name_the_scheduler_and_the_trainer(
    db_url: str, shipyard_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHIPYARD_DB", db_url)
    first = shipyard("db", "upgrade")
    assert first.returncode == 0, first.stderr
    assert "scheduler: 0 → 1" in first.stdout and "train: 0 → 1" in first.stdout
    status = shipyard("db", "status")
    assert "scheduler: 1\n" in status.stdout and "train: 1\n" in status.stdout
    Database(db_url).run("UPDATE shipyard_schema SET version = 3 WHERE subsystem = 'scheduler'")
    with pytest.raises(SchemaTooNew, match="scheduler schema at version 3, newer than"):
        JobStore(Database(db_url))


# The queue table as Shipyard wrote it before its jobs had conditions (and before versioning).
UNVERSIONED = """
CREATE TABLE scheduler_jobs (
    id TEXT PRIMARY KEY, spec TEXT NOT NULL, command TEXT NOT NULL, state TEXT NOT NULL,
    submitted REAL NOT NULL, started REAL, finished REAL, gpus TEXT, exit_code INTEGER,
    message TEXT NOT NULL DEFAULT ''
)"""


@pytest.mark.parametrize("opener", ["store", "db upgrade"])
def test_a_queue_from_before_conditions_gains_the_column_and_keeps_its_jobs(
    tmp_path: Path, opener: str
) -> None:
    url = f"sqlite://{tmp_path / 'catalog.db'}"
    old = Database(url)
    old.run(UNVERSIONED)
    spec = json.dumps({"id": "old1", "team": "a", "gpus": 1, "time_limit": 60.0})
    old.run(
        "INSERT INTO scheduler_jobs (id, spec, command, state, submitted) "
        "VALUES ('old1', ?, '[\"true\"]', 'queued', 1.5)",
        (spec,),
    )
    if opener == "db upgrade":
        upgrade(old, [SCHEDULER])
    store = JobStore(Database(url))
    row = store.get("old1")
    assert (row["state"], row["command"], row["condition"]) == ("queued", ["true"], None)
    store.update("old1", condition={"reason": "Pending", "message": "m", "since": 2.0})
    assert store.get("old1")["condition"]["since"] == 2.0
    assert version(old, SCHEDULER) == 1


def test_a_queue_with_conditions_from_before_versioning_is_taken_as_is(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'catalog.db'}"
    old = Database(url)
    old.run(UNVERSIONED)
    old.run("ALTER TABLE scheduler_jobs ADD COLUMN condition TEXT")
    old.run(
        "INSERT INTO scheduler_jobs (id, spec, command, state, submitted, condition) "
        "VALUES ('old2', '{}', '[]', 'queued', 1.0, ?)",
        (json.dumps({"reason": "Pending", "message": "m", "since": 1.0}),),
    )
    assert JobStore(Database(url)).get("old2")["condition"]["reason"] == "Pending"


def test_the_live_service_on_each_backend(
    db_url: str, shipyard_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Jobs submitted at once over HTTP (one server thread each) all run to their end."""
    monkeypatch.setenv("SHIPYARD_DB", db_url)
    with scheduler(shipyard_home, tmp_path) as live:
        spec = {"team": "a", "gpus": 1, "time_limit": 60, "command": [sys.executable, "-c", ""]}
        answers: list[tuple[int, dict[str, str]]] = []
        threads = [
            threading.Thread(target=lambda: answers.append(live.request("POST", "/jobs", spec)))
            for _ in range(8)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert [code for code, _ in answers] == [200] * 8
        ids = {body["id"] for _, body in answers}
        store = JobStore(Database(db_url))
        wait_for(lambda: {r["id"] for r in store.list("done")} == ids, limit=60)
        assert store.list() == live.request("GET", "/jobs")[1]
