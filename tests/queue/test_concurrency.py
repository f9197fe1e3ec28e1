"""Claimers in separate processes never share an item; idle workers wake on PostgreSQL NOTIFY."""

import subprocess
import sys
import threading
from collections import Counter

from shipyard.db import Database
from shipyard.db.cluster import Cluster
from shipyard.queue import Queue

CLAIMER = """
import sys
from shipyard.db import Database
from shipyard.queue import Queue

queue = Queue(Database(sys.argv[1]), owner=sys.argv[2])
print("ready", flush=True)
sys.stdin.readline()  # start together
while items := queue.claim("jobs", 7, lease=600):
    for item in items:
        queue.complete(item.id, item.token, sys.argv[2])
        print(item.id, flush=True)
"""


def test_claimers_in_separate_processes_never_get_the_same_item(db_url: str) -> None:
    queue = Queue(Database(db_url))
    queue.create("jobs")
    ids = [i for i, _ in queue.enqueue_many("jobs", list(range(300)))]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CLAIMER, db_url, f"claimer-{n}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(2)
    ]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    claimed = [proc.communicate(timeout=240)[0].split() for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0]
    counts = Counter(int(i) for got in claimed for i in got)
    assert sorted(counts) == ids
    assert set(counts.values()) == {1}
    for n, got in enumerate(claimed):
        assert {queue.get(int(i)).result for i in got} <= {f"claimer-{n}"}
    assert {len(queue.get(i).history) for i in ids} == {1}


def test_an_idle_postgresql_worker_wakes_when_an_item_arrives(pg_cluster: Cluster) -> None:
    url = pg_cluster.create_database()
    producer, worker = Queue(Database(url)), Queue(Database(url))
    producer.create("jobs")
    listening = threading.Event()
    woke: list[bool] = []

    def wait() -> None:
        worker.db.wait("shipyard_queue", 0.01)  # LISTEN before the producer sends
        listening.set()
        worker.wait("jobs", timeout=600)
        woke.append(bool(worker.claim("jobs")))

    waiter = threading.Thread(target=wait)
    waiter.start()
    assert listening.wait(60)
    producer.enqueue("jobs", {"x": 1})
    waiter.join(timeout=120)
    assert not waiter.is_alive(), "the worker slept through the notification"
    assert woke == [True]
