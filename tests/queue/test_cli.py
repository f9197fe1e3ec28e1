"""`shipyard queue ...` and `shipyard db ...` as a user runs them, on both backends."""

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from shipyard.db import Database
from shipyard.db.cluster import Cluster
from shipyard.queue import Queue

Cli = Callable[..., subprocess.CompletedProcess[str]]

# Reads the payload from stdin: {"x": n} prints {"double": 2n}; {"fail": true} exits 3.
DOUBLER = """
import json, sys
payload = json.load(sys.stdin)
if payload.get("fail"):
    print("something broke", file=sys.stderr)
    sys.exit(3)
print(json.dumps({"double": payload["x"] * 2}))
"""

# Waits for the file named in argv[1] (the test's go signal), noting in argv[2] that it started.
WAITER = """
import pathlib, sys, time
pathlib.Path(sys.argv[2]).write_text("started")
while not pathlib.Path(sys.argv[1]).exists():
    time.sleep(0.02)
print('"finished"')
"""


@pytest.fixture
def cli(db_url: str, shipyard_home: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    monkeypatch.setenv("SHIPYARD_DB", db_url)

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "shipyard", *args],
            capture_output=True,
            text=True,
            input=stdin,
            timeout=120,
            env=os.environ.copy(),
        )

    return run


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_put_work_inspect_dead_letter_and_requeue(cli: Cli, db_url: str) -> None:
    assert cli("queue", "create", "jobs", "--max-attempts", "2").returncode == 0
    put = cli("queue", "put", "jobs", "-", stdin='{"x": 1}\n{"x": 2}\n\n{"fail": true}\n')
    assert put.returncode == 0, put.stderr
    ids = [int(i) for i in put.stdout.split()]
    again = cli("queue", "put", "jobs", '{"x": 5}', "--key", "five", "--priority", "3")
    assert cli("queue", "put", "jobs", '{"x": 5}', "--key", "five").stdout == again.stdout
    worker = cli("queue", "worker", "jobs", "--until-empty", "--", sys.executable, "-c", DOUBLER)
    assert worker.returncode == 0, worker.stderr
    assert "3 item(s) completed" in worker.stderr

    queue = Queue(Database(db_url))
    assert [queue.get(i).result for i in ids[:2]] == [{"double": 2}, {"double": 4}]
    assert queue.get(int(again.stdout)).result == {"double": 10}
    stats = cli("queue", "stats", "jobs")
    assert "done 3  dead 1" in stats.stdout and "claims 5  completions 3" in stats.stdout
    dead = cli("queue", "dead", "jobs")
    assert dead.stdout.count("failed at") == 2
    assert "exit 3: something broke" in dead.stdout
    metrics = cli("queue", "stats", "--prometheus").stdout
    assert 'shipyard_queue_dead_items{queue="jobs"} 1.0' in metrics
    assert 'shipyard_queue_completions_total{queue="jobs"} 3.0' in metrics
    assert cli("queue", "requeue", "jobs").stderr.strip() == "1 item(s) requeued"
    assert queue.get(ids[2]).state == "ready"


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("queue", "put", "jobs", "{not json"), 2, "payload is not JSON"),
        (("queue", "put", "jobs", "NaN"), 2, "payload is not JSON: NaN is not JSON"),
        (("queue", "put", "nope", "1"), 4, "queue 'nope' does not exist"),
        (("queue", "put", "jobs", "1", "--delay", "-1"), 2, "--delay: expected a finite number"),
        (("queue", "worker", "jobs", "--lease", "-5", "--", "true"), 2, "--lease: expected a"),
        (("queue", "worker", "jobs"), 2, "a command is required after --"),
        (("queue", "worker", "nope", "--", "true"), 4, "queue 'nope' does not exist"),
        (("queue", "create", "bad name"), 2, "queue name 'bad name'"),
        (("queue", "show", "12345"), 4, "queue item 12345 does not exist"),
    ],
)
def test_bad_input_exits_with_its_code_and_a_line_naming_it(
    cli: Cli, args: tuple[str, ...], code: int, message: str
) -> None:
    cli("queue", "create", "jobs")
    result = cli(*args)
    assert result.returncode == code, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert cli("queue", "ls", "jobs").stdout == ""


def test_db_upgrade_and_a_schema_newer_than_this_shipyard(cli: Cli, db_url: str) -> None:
    first = cli("db", "upgrade")
    assert first.returncode == 0
    assert "catalog: 0 → 1" in first.stdout and "queue: 0 → 1" in first.stdout
    assert "queue: 1 (up to date)" in cli("db", "upgrade").stdout
    Database(db_url).run("UPDATE shipyard_schema SET version = 7 WHERE subsystem = 'queue'")
    refused = cli("db", "upgrade")
    assert refused.returncode == 6
    assert "queue schema at version 7, newer than this Shipyard understands" in refused.stderr
    assert "queue: 7  (this Shipyard: 1)" in cli("db", "status").stdout


def start_worker(tmp_path: Path, *options: str) -> tuple[subprocess.Popen[str], Path, Path]:
    go, started = tmp_path / "go", tmp_path / "started"
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "shipyard",
            "queue",
            "worker",
            "jobs",
            *options,
            "--",
            sys.executable,
            "-c",
            WAITER,
            str(go),
            str(started),
        ],
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )
    wait_for(started.exists, "the command to start")
    return worker, go, started


def test_sigterm_lets_the_running_item_finish(cli: Cli, db_url: str, tmp_path: Path) -> None:
    cli("queue", "create", "jobs")
    cli("queue", "put", "jobs", '"a"')
    cli("queue", "put", "jobs", '"b"')
    worker, go, _ = start_worker(tmp_path, "--grace", "600")
    worker.send_signal(signal.SIGTERM)
    go.touch()
    _, err = worker.communicate(timeout=120)
    assert worker.returncode == 0, err
    states = sorted(r.state for r in Queue(Database(db_url)).items("jobs"))
    assert states == ["done", "ready"]  # finished the one it held, claimed no other


def test_sigterm_past_the_grace_releases_the_item(cli: Cli, db_url: str, tmp_path: Path) -> None:
    cli("queue", "create", "jobs", "--max-attempts", "1")
    cli("queue", "put", "jobs", '"a"')
    worker, _, _ = start_worker(tmp_path, "--grace", "0")
    worker.send_signal(signal.SIGTERM)
    _, err = worker.communicate(timeout=120)
    assert worker.returncode == 0, err
    assert "released: the worker is stopping" in err
    (item,) = Queue(Database(db_url)).items("jobs")
    assert (item.state, item.attempts) == ("ready", 0)  # released, not a spent attempt


def test_a_result_survives_a_database_restart(
    tmp_path: Path, shipyard_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command finishes while PostgreSQL is down: the worker says so, retries with
    backoff, and commits the result once the server is back."""
    pytest.importorskip("psycopg")
    cluster = Cluster(durable=False)
    try:
        url = cluster.create_database()
        monkeypatch.setenv("SHIPYARD_DB", url)
        queue = Queue(Database(url))
        queue.create("jobs")
        item_id, _ = queue.enqueue("jobs", "x")
        queue.close()
        worker, go, _ = start_worker(tmp_path, "--lease", "600", "--until-empty")
        cluster.stop()
        go.touch()
        assert worker.stderr is not None
        seen = ""
        while "retrying in" not in seen:
            line = worker.stderr.readline()
            assert line, f"the worker ended without retrying: {seen}"
            seen += line
        assert f"complete item {item_id}: database" in seen and "is unreachable" in seen
        cluster.start()
        _, err = worker.communicate(timeout=180)
        assert worker.returncode == 0, seen + err
        record = Queue(Database(url)).get(item_id)
        assert (record.state, record.result) == ("done", "finished")
    finally:
        cluster.remove()
