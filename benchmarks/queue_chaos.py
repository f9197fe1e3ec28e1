"""The queue under chaos: workers SIGKILLed and frozen, the database server restarted.

N items (1% built to fail), W worker processes on one PostgreSQL server (or SQLite). Each
worker claims an item, works a few milliseconds, and completes it with an effect (a row in
`chaos_effects` naming the item and the lease token) in the completion's transaction. Every
second a random worker is SIGKILLed and a fresh one started; every few seconds one is frozen
(SIGSTOP) past its lease and thawed, so it wakes as a zombie holding stale leases; once, mid-run,
the PostgreSQL server is restarted. Then the workers drain the queue.

    python benchmarks/queue_chaos.py [--items 10000] [--workers 8] [--backend postgresql]

Prints one JSON line: lost (items neither done nor dead), double_effects (items whose effect
happened more than once), stale_completions (effects under a token that is not the item's
final lease), dead (dead-lettered items) beside built_to_fail and wrongly_dead, the chaos
applied, and value: the sum of lost, double_effects, stale_completions and wrongly_dead (goal 0).
"""

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import suppress
from pathlib import Path

from shipyard.db import Database, DatabaseUnavailable
from shipyard.db.cluster import Cluster
from shipyard.queue import Queue, StaleLease

QUEUE = "chaos"
LEASE = 2.0


def work(url: str) -> None:
    """One worker: claim, work, complete with the effect; ride out outages; count refusals."""
    queue = None
    while queue is None:
        try:
            queue = Queue(Database(url))
        except DatabaseUnavailable:
            time.sleep(0.2)
    while True:
        try:
            items = queue.claim(QUEUE, 1, lease=LEASE)
        except DatabaseUnavailable:
            time.sleep(0.2)
            continue
        if not items:
            time.sleep(0.05)
            continue
        item = items[0]
        time.sleep(random.uniform(0.001, 0.01))
        effect = _effect(item.id, item.token)
        while True:
            try:
                if item.payload.get("fail"):
                    queue.fail(item.id, item.token, "built to fail")
                else:
                    queue.complete(item.id, item.token, item.payload["n"], effect=effect)
                break
            except StaleLease:
                print("refused", flush=True)  # a zombie's late call, stopped by its token
                break
            except DatabaseUnavailable:
                time.sleep(0.2)


def _effect(item_id: int, token: int):  # type: ignore[no-untyped-def]
    def effect(db: Database) -> None:
        db.run("INSERT INTO chaos_effects VALUES (?, ?)", (item_id, token))

    return effect


class Workers:
    def __init__(self, url: str, count: int, log: Path) -> None:
        self.url, self.log = url, log.open("a")
        self.procs = [self._start() for _ in range(count)]
        self.frozen: dict[int, float] = {}  # pid -> when to thaw it

    def _start(self) -> "subprocess.Popen[str]":
        return subprocess.Popen(
            [sys.executable, __file__, "--worker", "--url", self.url],
            stdout=self.log,
            text=True,
        )

    def kill_one(self) -> None:
        victim = random.randrange(len(self.procs))
        self.procs[victim].kill()
        self.procs[victim].wait()
        self.procs[victim] = self._start()

    def freeze_one(self, seconds: float) -> None:
        pid = random.choice(self.procs).pid
        os.kill(pid, signal.SIGSTOP)
        self.frozen[pid] = time.monotonic() + seconds

    def thaw_due(self) -> None:
        for pid, at in list(self.frozen.items()):
            if at <= time.monotonic():
                with suppress(ProcessLookupError):  # killed while frozen
                    os.kill(pid, signal.SIGCONT)
                del self.frozen[pid]

    def stop(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()
        self.log.close()


def run(args: argparse.Namespace, url: str, cluster: Cluster | None, tmp: Path) -> dict[str, int]:
    queue = Queue(Database(url))
    queue.create(QUEUE, max_attempts=5)
    queue.db.run("CREATE TABLE chaos_effects (item_id BIGINT NOT NULL, token BIGINT NOT NULL)")
    failing = set(random.Random(0).sample(range(args.items), args.items // 100))
    for start in range(0, args.items, 1000):
        chunk = range(start, min(start + 1000, args.items))
        queue.enqueue_many(QUEUE, [{"n": n, "fail": n in failing} for n in chunk])
    workers = Workers(url, args.workers, tmp / "workers.log")
    kills = freezes = restarts = 0
    started = time.monotonic()
    try:
        while True:
            time.sleep(args.kill_every)
            workers.thaw_due()
            stats = _stats(queue)
            if stats is not None and stats.ready + stats.leased == 0:
                break
            workers.kill_one()
            kills += 1
            if kills % 3 == 0:
                workers.freeze_one(LEASE * 1.5)
                freezes += 1
            progress = stats.done / args.items if stats else 0.0
            if cluster is not None and not restarts and progress >= args.restart_at:
                cluster.restart("immediate")  # a crash, as the server sees it
                restarts += 1
    finally:
        workers.stop()
    effects = queue.db.rows(
        "SELECT e.item_id, e.token, i.lease_token FROM chaos_effects e "
        "JOIN queue_items i ON i.id = e.item_id"
    )
    per_item: dict[int, int] = {}
    for item_id, _, _ in effects:
        per_item[item_id] = per_item.get(item_id, 0) + 1
    states = dict(queue.db.rows("SELECT state, COUNT(*) FROM queue_items GROUP BY state"))
    dead_ns = {r.payload["n"] for r in queue.items(QUEUE, "dead", limit=args.items)}
    log = (tmp / "workers.log").read_text().split()
    return {
        "items": args.items,
        "lost": args.items - states.get("done", 0) - states.get("dead", 0),
        "double_effects": sum(1 for count in per_item.values() if count > 1),
        "stale_completions": sum(1 for _, token, final in effects if token != final),
        "dead": states.get("dead", 0),
        "built_to_fail": len(failing),
        "wrongly_dead": len(dead_ns - failing),
        "done_without_effect": states.get("done", 0) - len(per_item),
        "zombie_calls_refused": log.count("refused"),
        "kills": kills,
        "freezes": freezes,
        "db_restarts": restarts,
        "seconds": round(time.monotonic() - started, 1),
    }


def _stats(queue: Queue):  # type: ignore[no-untyped-def]
    try:
        return queue.stats(QUEUE)[0]
    except DatabaseUnavailable:
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000, help="items to work")
    parser.add_argument("--workers", type=int, default=8, help="worker processes")
    parser.add_argument("--kill-every", type=float, default=1.0, help="seconds between kills")
    parser.add_argument("--backend", choices=["postgresql", "sqlite"], default="postgresql")
    parser.add_argument(
        "--restart-at", type=float, default=0.33, help="restart the server at this done fraction"
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        work(args.url)
        return
    with tempfile.TemporaryDirectory() as tmp:
        if args.backend == "sqlite":
            result = run(args, f"sqlite://{Path(tmp) / 'chaos.db'}", None, Path(tmp))
        else:
            cluster = Cluster(durable=True)
            try:
                result = run(args, cluster.create_database(), cluster, Path(tmp))
            finally:
                cluster.remove()
    wrong = sum(result[k] for k in ("lost", "double_effects", "stale_completions", "wrongly_dead"))
    print(
        json.dumps(
            {
                "name": "queue_chaos",
                "unit": "items",
                "value": wrong,
                "backend": args.backend,
                **result,
            }
        )
    )


if __name__ == "__main__":
    main()
