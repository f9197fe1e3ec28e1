"""Claim + complete throughput: Shipyard's queue against PgQueuer and Procrastinate.

One PostgreSQL server (a throwaway cluster, fsync and `synchronous_commit` on), N items with the
same JSON payload each, 8 worker processes per system, each job a no-op. A system's figure is
items / (last job finished - first job started) across its workers, so neither start-up nor
shutdown is counted; a baseline that buffers its completions (PgQueuer) is not charged for the
last flush, which favours it slightly. Shipyard
also runs on SQLite with 8 processes. The baselines come from PyPI
(`pip install pgqueuer procrastinate`); a missing one is reported as null.

    python benchmarks/queue_throughput.py [--items 20000] [--workers 8] [--batch 10]

Prints one JSON line: value (Shipyard on PostgreSQL, items/s), pgqueuer, procrastinate,
baseline (the faster of the two), ratio (value / baseline), sqlite (Shipyard on SQLite).
"""

import argparse
import asyncio
import importlib.util
import json
import logging
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from shipyard import children
from shipyard.db import Database
from shipyard.db.cluster import Cluster
from shipyard.queue import Queue

QUEUE = "bench"


# Worker processes: each runs until the queue is empty, then prints when its first job started
# and its last one finished.


class Span:
    def __init__(self) -> None:
        self.first = self.last = 0.0

    def start(self) -> None:
        self.first = self.first or time.time()

    def end(self) -> None:
        self.last = time.time()

    def report(self) -> None:
        if self.first:
            print(self.first, self.last, flush=True)


def work_shipyard(url: str, batch: int) -> None:
    queue, span = Queue(Database(url)), Span()
    while items := queue.claim(QUEUE, batch, lease=300):
        span.start()
        refused = queue.complete_many([(item, None) for item in items])
        assert not refused, refused
        span.end()
    span.report()


def work_pgqueuer(url: str, batch: int) -> None:
    import psycopg
    from pgqueuer import PsycopgDriver, QueueManager
    from pgqueuer.queries import Queries
    from pgqueuer.types import QueueExecutionMode

    async def main() -> None:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        manager = QueueManager(Queries(PsycopgDriver(conn)))

        @manager.entrypoint(QUEUE)
        async def job(job: object) -> None:
            SPAN.start()
            SPAN.end()

        await manager.run(batch_size=batch, mode=QueueExecutionMode.drain)
        await conn.close()
        SPAN.report()

    asyncio.run(main())


def work_procrastinate(url: str, batch: int) -> None:
    app = _procrastinate_app(url)

    async def main() -> None:
        async with app.open_async():
            await app.run_worker_async(
                queues=[QUEUE], wait=False, concurrency=batch, install_signal_handlers=False
            )
        SPAN.report()

    asyncio.run(main())


def _procrastinate_app(url: str):  # type: ignore[no-untyped-def]
    import procrastinate

    logging.getLogger("procrastinate").setLevel(logging.ERROR)  # "App in __main__" notes
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name="job", queue=QUEUE)
    async def job(n: int) -> None:
        SPAN.start()
        SPAN.end()

    return app


SPAN = Span()  # the baselines' job functions record into this one, per worker process


WORKERS = {
    "shipyard": work_shipyard,
    "pgqueuer": work_pgqueuer,
    "procrastinate": work_procrastinate,
}


# Filling each system's queue (not timed)


def fill(system: str, url: str, items: int) -> None:
    payloads = [{"n": i} for i in range(items)]
    if system == "shipyard":
        queue = Queue(Database(url))
        queue.create(QUEUE)
        for start in range(0, items, 1000):
            queue.enqueue_many(QUEUE, payloads[start : start + 1000])
        queue.close()
    elif system == "pgqueuer":
        asyncio.run(_fill_pgqueuer(url, payloads))
    else:
        asyncio.run(_fill_procrastinate(url, payloads))


async def _fill_pgqueuer(url: str, payloads: list[dict[str, int]]) -> None:
    import psycopg
    from pgqueuer import PsycopgDriver
    from pgqueuer.queries import Queries

    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    queries = Queries(PsycopgDriver(conn))
    await queries.install()
    for start in range(0, len(payloads), 1000):
        chunk = payloads[start : start + 1000]
        await queries.enqueue(
            [QUEUE] * len(chunk), [json.dumps(p).encode() for p in chunk], [0] * len(chunk)
        )
    await conn.close()


async def _fill_procrastinate(url: str, payloads: list[dict[str, int]]) -> None:
    app = _procrastinate_app(url)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        job = app.tasks["job"]
        for start in range(0, len(payloads), 1000):
            await job.batch_defer_async(*payloads[start : start + 1000])


def run(system: str, url: str, items: int, workers: int, batch: int) -> float:
    """Fill `system`'s queue on `url`, drain it with `workers` processes; items per second."""
    fill(system, url, items)
    procs = [  # they die with this script, however it ends
        children.spawn(
            [sys.executable, __file__, "--worker", system, "--url", url, "--batch", str(batch)],
            stdout=subprocess.PIPE,
        )
        for _ in range(workers)
    ]
    spans = []
    for proc in procs:
        out, _ = proc.communicate(timeout=3600)
        children.reap(proc)
        if proc.returncode != 0:
            raise SystemExit(f"{system} worker failed with exit {proc.returncode}")
        spans += [tuple(map(float, line.split())) for line in out.decode().splitlines() if line]
    elapsed = max(last for _, last in spans) - min(first for first, _ in spans)
    left = remaining(system, url)
    if left:
        raise SystemExit(f"{system}: {left} items were not completed")
    return items / elapsed


def remaining(system: str, url: str) -> int:
    db = Database(url)
    query = {
        "shipyard": "SELECT COUNT(*) FROM queue_items WHERE state <> 'done'",
        "pgqueuer": "SELECT COUNT(*) FROM pgqueuer",
        "procrastinate": "SELECT COUNT(*) FROM procrastinate_jobs WHERE status <> 'succeeded'",
    }[system]
    count = int(db.rows(query)[0][0])
    db.close()
    return count


def installed(system: str) -> bool:
    return system == "shipyard" or importlib.util.find_spec(system) is not None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=20_000, help="items per system")
    parser.add_argument("--workers", type=int, default=8, help="worker processes per system")
    parser.add_argument("--batch", type=int, default=10, help="items per claim (all systems)")
    parser.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        WORKERS[args.worker](args.url, args.batch)
        return

    figures: dict[str, float | None] = {}
    cluster = Cluster(durable=True)  # fsync and synchronous_commit on, for every system alike
    try:
        for system in ("shipyard", "pgqueuer", "procrastinate"):
            figures[system] = (
                run(system, cluster.create_database(), args.items, args.workers, args.batch)
                if installed(system)
                else None
            )
            print(f"{system}: {figures[system] or 0:.0f} items/s", file=sys.stderr)
    finally:
        cluster.remove()
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = run(
            "shipyard", f"sqlite://{Path(tmp) / 'q.db'}", args.items, args.workers, args.batch
        )
    baselines = [v for k, v in figures.items() if k != "shipyard" and v]
    value = figures["shipyard"] or 0.0
    print(
        json.dumps(
            {
                "name": "queue_throughput",
                "metric": f"claim+complete items/s, {args.workers} processes, one PostgreSQL",
                "unit": "items/s",
                "value": round(value, 1),
                "baseline": round(max(baselines), 1) if baselines else None,
                "pgqueuer": figures["pgqueuer"] and round(figures["pgqueuer"], 1),
                "procrastinate": figures["procrastinate"] and round(figures["procrastinate"], 1),
                "ratio": round(value / max(baselines), 3) if baselines else None,
                "sqlite": round(sqlite, 1),
                "items": args.items,
                "workers": args.workers,
                "batch": args.batch,
            }
        )
    )


if __name__ == "__main__":
    main()
