"""The queue under chaos: workers SIGKILLed and frozen, the database server restarted.

N items (1% built to fail), W worker processes on one PostgreSQL server (or SQLite). Each
worker claims an item, works a few milliseconds, and completes it with an effect (a row in
`chaos_effects` naming the item and the lease token) in the completion's transaction. Every
second a random worker is SIGKILLed and a fresh one started; every few seconds one is frozen
(SIGSTOP) past its lease and thawed, so it wakes as a zombie holding stale leases; once, mid-run,
the PostgreSQL server is restarted. Then the workers drain the queue.

Then the same chaos twice more with `shipyard queue worker` processes running a command with an
external side effect (benchmarks/queue_effect.py: a row in a SQLite file outside the queue's
database), once fenced (the command refuses work under a stale lease token and writes a key's
effect once) and once unfenced (it writes on every run that gets to the end).

    python benchmarks/queue_chaos.py [--items 10000] [--workers 8] [--backend postgresql]
                                     [--commands 300]

Prints one JSON line: lost (items neither done nor dead), double_effects (items whose effect
happened more than once), stale_completions (effects under a token that is not the item's
final lease), dead (dead-lettered items) beside built_to_fail and wrongly_dead, the chaos
applied; for the command runs, fenced_* and unfenced_*: duplicate_effects (keys whose external
effect happened more than once), missing_effects (done keys without one), lost and kills; and
value: the sum of lost, double_effects, stale_completions, wrongly_dead and the fenced command
run's lost, duplicate and missing effects (goal 0). The unfenced duplicates are not counted: they
are what at-least-once means for a command that does not check its token.
"""

import argparse
import json
import os
import random
import signal
import sqlite3
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
EFFECT = Path(__file__).with_name("queue_effect.py")


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
    def __init__(self, argv: list[str], count: int, log: Path, env: dict[str, str]) -> None:
        self.argv, self.env, self.log = argv, env, log.open("a")
        self.procs = [self._start() for _ in range(count)]
        self.frozen: dict[int, float] = {}  # pid -> when to thaw it

    def _start(self) -> "subprocess.Popen[str]":
        return subprocess.Popen(
            self.argv, stdout=self.log, stderr=subprocess.DEVNULL, text=True, env=self.env
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
        for pid in self.frozen:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        for proc in self.procs:
            proc.kill()
            proc.wait()
        self.log.close()


def chaos(
    args: argparse.Namespace, queue: Queue, name: str, workers: Workers, cluster: Cluster | None
) -> dict[str, int]:
    """Kill a worker every `kill_every` seconds (freezing one past its lease every third time,
    restarting the server once) until nothing of `name` is ready or leased."""
    total = queue.stats(name)[0].ready
    kills = freezes = restarts = 0
    started = time.monotonic()
    try:
        while True:
            time.sleep(args.kill_every)
            workers.thaw_due()
            stats = _stats(queue, name)
            if stats is not None and stats.ready + stats.leased == 0:
                break
            workers.kill_one()
            kills += 1
            if kills % 3 == 0:
                workers.freeze_one(LEASE * 1.5)
                freezes += 1
            progress = stats.done / total if stats else 0.0
            if cluster is not None and not restarts and progress >= args.restart_at:
                cluster.restart("immediate")  # a crash, as the server sees it
                restarts += 1
    finally:
        workers.stop()
    return {
        "kills": kills,
        "freezes": freezes,
        "db_restarts": restarts,
        "seconds": round(time.monotonic() - started, 1),
    }


def run(args: argparse.Namespace, url: str, cluster: Cluster | None, tmp: Path) -> dict[str, int]:
    queue = Queue(Database(url))
    queue.create(QUEUE, max_attempts=5)
    queue.db.run("CREATE TABLE chaos_effects (item_id BIGINT NOT NULL, token BIGINT NOT NULL)")
    failing = set(random.Random(0).sample(range(args.items), args.items // 100))
    for start in range(0, args.items, 1000):
        chunk = range(start, min(start + 1000, args.items))
        queue.enqueue_many(QUEUE, [{"n": n, "fail": n in failing} for n in chunk])
    argv = [sys.executable, __file__, "--worker", "--url", url]
    workers = Workers(argv, args.workers, tmp / "workers.log", dict(os.environ))
    applied = chaos(args, queue, QUEUE, workers, cluster)
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
        **applied,
    }


def run_commands(
    args: argparse.Namespace, url: str, cluster: Cluster | None, tmp: Path, fenced: bool
) -> dict[str, int]:
    """The chaos on `shipyard queue worker` processes whose command has an external effect."""
    kind = "fenced" if fenced else "unfenced"
    name, store = f"chaos-{kind}", tmp / f"effects-{kind}.db"
    queue = Queue(Database(url))
    queue.create(name, max_attempts=10)
    rng = random.Random(1)
    payloads = [{"ms": rng.randint(20, 200)} for _ in range(args.commands)]
    queue.enqueue_many(name, payloads, keys=[f"k{n}" for n in range(args.commands)])
    command = [sys.executable, "-I", str(EFFECT), str(store), *(["--fenced"] if fenced else [])]
    argv = [sys.executable, "-m", "shipyard", "queue", "worker", name, "--lease", str(LEASE)]
    env = dict(os.environ) | {"SHIPYARD_DB": url}
    workers = Workers([*argv, "--", *command], args.workers, tmp / f"{kind}.log", env)
    applied = chaos(args, queue, name, workers, cluster)
    with sqlite3.connect(store) as db:
        per_key = dict(db.execute("SELECT key, COUNT(*) FROM effects GROUP BY key").fetchall())
    done = {r.key for r in queue.items(name, "done", limit=args.commands)}
    states = dict(
        queue.db.rows(
            "SELECT state, COUNT(*) FROM queue_items WHERE queue = ? GROUP BY state", (name,)
        )
    )
    return {
        f"{kind}_duplicate_effects": sum(1 for n in per_key.values() if n > 1),
        f"{kind}_missing_effects": len(done - set(per_key)),
        f"{kind}_lost": args.commands - states.get("done", 0) - states.get("dead", 0),
        f"{kind}_dead": states.get("dead", 0),
        f"{kind}_kills": applied["kills"],
        f"{kind}_freezes": applied["freezes"],
    }


def _stats(queue: Queue, name: str):  # type: ignore[no-untyped-def]
    try:
        return queue.stats(name)[0]
    except DatabaseUnavailable:
        return None


def _database(cluster: Cluster | None, tmp: Path, name: str) -> str:
    if cluster is None:
        return f"sqlite://{tmp / f'{name}.db'}"
    return cluster.create_database(name.replace("-", "_").lower())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000, help="items to work")
    parser.add_argument("--workers", type=int, default=8, help="worker processes")
    parser.add_argument("--kill-every", type=float, default=1.0, help="seconds between kills")
    parser.add_argument("--backend", choices=["postgresql", "sqlite"], default="postgresql")
    parser.add_argument(
        "--restart-at", type=float, default=0.33, help="restart the server at this done fraction"
    )
    parser.add_argument(
        "--commands", type=int, default=300, help="items of each command run (0: none)"
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        work(args.url)
        return
    with tempfile.TemporaryDirectory() as tmp:
        cluster = None if args.backend == "sqlite" else Cluster(durable=True)
        try:
            result = run(args, _database(cluster, Path(tmp), "chaos"), cluster, Path(tmp))
            for fenced in (True, False) if args.commands else ():
                url = _database(cluster, Path(tmp), f"commands-{fenced}")
                result |= run_commands(args, url, cluster, Path(tmp), fenced)
        finally:
            if cluster is not None:
                cluster.remove()
    counted = ["lost", "double_effects", "stale_completions", "wrongly_dead"]
    if args.commands:
        counted += ["fenced_lost", "fenced_duplicate_effects", "fenced_missing_effects"]
    wrong = sum(result[k] for k in counted)
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
