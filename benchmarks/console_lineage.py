"""Lineage of depth 5, up and down, through the console's API on a large generated catalog.

    .venv/bin/python benchmarks/console_lineage.py [--artifacts 100000] [--edges 1000000]
        [--queries 200] [--db postgresql://...]

The catalog (SQLite in a temp home, or the PostgreSQL database `--db`/`SHIPYARD_DB` names, whose
catalog tables are emptied first) holds `--artifacts` artifacts, each made by its own run from
inputs among the 2,000 artifacts before it, so that `--edges` edges in all (run → output and
input → run) form a deep DAG like a registry's. A real uvicorn serves the console on loopback;
each query is `GET /api/artifacts/ID/lineage?direction=D&depth=5` from a random artifact, timed
from request to parsed reply. The goal is p95 ≤ 100 ms (Marquez users report 10–15 s).
"""

import argparse
import http.client
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import uvicorn

from shipyard.catalog import open_catalog
from shipyard.db import database_url
from shipyard.httpguard import Guard
from shipyard.web import Console, create_app

GOAL_MS = 100.0
MARQUEZ_MS = 10_000.0  # the low end of the 10-15 s Marquez users report (issue #3058)
WINDOW = 2000  # a run's inputs come from the artifacts made just before it
BATCH = 20_000


def artifact_id(index: int) -> str:
    return f"{index:064x}"


def build(db_url: str, artifacts: int, edges: int, seed: int) -> list[str]:
    """Fill the catalog at `db_url`; returns the artifact ids."""
    rng = random.Random(seed)
    catalog = open_catalog(db_url)
    db = catalog.db  # type: ignore[attr-defined]  # bulk load below the Catalog protocol
    with db.transaction():
        for table in ("edges", "alias_history", "aliases", "runs", "artifacts"):
            db.run(f"DELETE FROM {table}")
    inputs_per_run = max(1, (edges - artifacts) // artifacts)
    ids = [artifact_id(i) for i in range(artifacts)]
    now = time.time()
    art_rows, run_rows, edge_rows = [], [], []
    for index, made in enumerate(ids):
        run = f"run-{index:016x}"
        art_rows.append((made, "dataset" if index % 10 else "model", 1, 1, now, run, "{}"))
        run_rows.append((run, "train", "succeeded", now, now, "0" * 64, "bench", "bench", "{}"))
        edge_rows.append((run, made))
        if index:
            low = max(0, index - WINDOW)
            count = min(inputs_per_run, index - low)
            for parent in rng.sample(range(low, index), count):
                edge_rows.append((ids[parent], run))
        if len(edge_rows) >= BATCH or index == len(ids) - 1:
            with db.transaction():
                db.run_many("INSERT INTO artifacts VALUES (?, ?, ?, ?, ?, ?, ?)", art_rows)
                db.run_many("INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", run_rows)
                db.run_many("INSERT INTO edges VALUES (?, ?) ON CONFLICT DO NOTHING", edge_rows)
            art_rows, run_rows, edge_rows = [], [], []
    catalog.set_alias("bench-latest", ids[-1], None, "bench")
    catalog.close()
    return ids


def serve(home: Path) -> tuple[uvicorn.Server, int]:
    console = Console(home, Guard.start("console", home, "127.0.0.1"))
    config = uvicorn.Config(create_app(console), host="127.0.0.1", port=0, log_level="warning")
    server = uvicorn.Server(config)
    threading.Thread(target=server.run, daemon=True).start()
    deadline = time.monotonic() + 30
    while not (server.started and server.servers):
        if time.monotonic() > deadline:
            raise RuntimeError("the console did not start within 30 s")
        time.sleep(0.01)
    port: int = server.servers[0].sockets[0].getsockname()[1]
    return server, port


def measure(port: int, ids: list[str], direction: str, queries: int, seed: int) -> list[float]:
    """Milliseconds per lineage request; each reply is parsed and checked to be a graph."""
    rng = random.Random(seed)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    times = []
    for _ in range(queries):
        node = rng.choice(ids)
        start = time.perf_counter()
        conn.request("GET", f"/api/artifacts/{node}/lineage?direction={direction}&depth=5")
        reply = conn.getresponse()
        graph = json.loads(reply.read())
        times.append((time.perf_counter() - start) * 1000)
        if reply.status != 200 or graph["root"] != node:
            raise RuntimeError(f"lineage of {node}: {reply.status} {graph}")
    conn.close()
    return times


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def run(
    artifacts: int, edges: int, queries: int, db: str | None, seed: int = 0
) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="shipyard-lineage-") as tmp:
        home = Path(tmp)
        os.environ["SHIPYARD_HOME"] = str(home)
        if db:
            os.environ["SHIPYARD_DB"] = db
        url = database_url(home)
        start = time.perf_counter()
        ids = build(url, artifacts, edges, seed)
        print(
            f"built {artifacts:,} artifacts, ~{edges:,} edges in {time.perf_counter() - start:.1f}s"
            f" ({url.split('://')[0] if '://' in url else 'sqlite'})",
            file=sys.stderr,
        )
        server, port = serve(home)
        try:
            measure(port, ids, "up", 5, seed)  # warm the connection and the page cache
            out = {}
            for direction in ("up", "down"):
                times = measure(port, ids, direction, queries, seed + 1)
                out[f"{direction}_p50_ms"] = statistics.median(times)
                out[f"{direction}_p95_ms"] = percentile(times, 0.95)
            return out
        finally:
            server.should_exit = True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--artifacts", type=int, default=100_000, help="artifacts to generate")
    parser.add_argument("--edges", type=int, default=1_000_000, help="lineage edges to generate")
    parser.add_argument("--queries", type=int, default=200, help="requests per direction")
    parser.add_argument("--db", default=os.environ.get("SHIPYARD_DB"), help="postgresql://...")
    parser.add_argument("--seed", type=int, default=0, help="seed of the graph and the queries")
    args = parser.parse_args()
    result = run(args.artifacts, args.edges, args.queries, args.db, args.seed)
    for key, value in result.items():
        print(f"{key:12} {value:8.1f}")
    worst = max(result["up_p95_ms"], result["down_p95_ms"])
    print(
        f"lineage depth 5 p95 {worst:.1f} ms (goal {GOAL_MS:.0f} ms, ratio {worst / GOAL_MS:.2f}); "
        f"Marquez's reported {MARQUEZ_MS / 1000:.0f} s is {MARQUEZ_MS / worst:.0f}x that"
    )
    return 0 if worst <= GOAL_MS else 1


if __name__ == "__main__":
    sys.exit(main())
