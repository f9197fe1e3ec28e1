"""An embedding backfill under fire, then a zero-downtime cut-over.

1. A snapshot of the Debian documentation corpus large enough for `--chunks` chunks (pages are
   reused under new ids when the corpus runs out), all-MiniLM-L6-v2 through its ONNX export.
2. The job runs on `--workers` local worker processes; one of them is SIGKILLed every
   `--kill-every` seconds (the executor starts a replacement; the dead worker's shard comes
   back when its lease runs out). A shard killed more often than its 10 attempts allow is
   dead-lettered; the script then requeues it (`shipyard queue requeue`) and reports how many.
3. Every committed shard is read back: `lost_chunks` are chunks the chunker says should exist
   and no shard holds, `duplicate_chunks` are (doc, chunk) pairs held twice.
4. Yesterday's index (flat, from the same vectors) serves under an alias from
   `shipyard batch search-serve` while a client queries it continuously.
5. A change log (1% of pages rewritten, 0.2% deleted, 50 new) is embedded and merged, the HNSW
   index is built and measured (recall@10 against flat on held-out queries), and the alias is
   flipped through the service. `p99_query_ms_during_flip` covers the queries that overlapped
   the flip (from the request until a second after the reply), against the p99 before it.

Usage: .venv/bin/python benchmarks/embed_backfill.py [--chunks 100000] [--workers 2]
"""

import argparse
import atexit
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import httpx
import numpy as np

from shipyard.batch import (
    ChunkPolicy,
    EncodeConfig,
    IndexConfig,
    build_index,
    catch_up,
    flip,
    prepare,
    put_snapshot,
    run_local,
    shard_path,
    submit,
)
from shipyard.batch.chunker import Chunker
from shipyard.batch.index import build, collect
from shipyard.batch.models import export_onnx, import_minilm, load
from shipyard.batch.service import SERVICE
from shipyard.batch.shards import read_shard
from shipyard.batch.snapshot import decode
from shipyard.data.corpus import build_warcs, texts
from shipyard.httpguard import read_token
from shipyard.queue import open_queue
from shipyard.workspace import Workspace

POLICY = ChunkPolicy(max_tokens=128, overlap=16)
ALIAS = "debian-docs-search"
SERVE = (
    "import argparse, sys\n"
    "from shipyard.cli import batch\n"
    "parser = argparse.ArgumentParser(); batch.register(parser.add_subparsers())\n"
    "args = parser.parse_args(sys.argv[1:]); sys.exit(args.func(args))\n"
)


def corpus_rows(chunks: int, corpus: Path | None, tokenizer: object) -> tuple[list, int]:
    """(doc id, UTF-8 text) rows holding about `chunks` chunks, and how many exactly."""
    with tempfile.TemporaryDirectory() as tmp:
        # Pages of the python docs hold ~10 chunks each: extract only as many as needed.
        pages = texts(build_warcs(corpus or Path(tmp)), chunks // 4 + 50, min_words=20)
    step = POLICY.max_tokens - POLICY.overlap
    rows, total, lap = [], 0, 0
    while total < chunks:
        for n, page in enumerate(pages):
            tokens = len(tokenizer.encode(page, add_special_tokens=False).ids)  # type: ignore[attr-defined]
            total += 1 + max(0, -(-(tokens - POLICY.max_tokens) // step))
            rows.append((f"lap{lap}/page-{n:05d}", page.encode()))
            if total >= chunks:
                break
        lap += 1
    return rows, total


def expected_keys(ws: Workspace, version: str, rows: list) -> set[tuple[str, int]]:

    model = load(ws, version)
    chunker = Chunker(model.tokenizer, POLICY, model.window)
    keys: set[tuple[str, int]] = set()
    for start in range(0, len(rows), 500):
        out = chunker.chunk([decode(d, t) for d, t in rows[start : start + 500]])
        keys.update(zip(out.doc_ids, out.chunk_ids, strict=True))
    return keys


def killer(procs: list, every: float, stop: threading.Event, kills: list) -> None:
    rng = random.Random(0)
    while not stop.wait(every):
        live = [p for p in procs if p.poll() is None]
        if live:
            victim = rng.choice(live)
            victim.send_signal(signal.SIGKILL)
            kills.append(victim.pid)


def p99(values: list[float]) -> float:
    return float(np.percentile(values, 99)) if values else 0.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--kill-every", type=float, default=4.0)
    parser.add_argument("--lease", type=float, default=10.0)
    parser.add_argument("--shard-seconds", type=float, default=20.0)
    parser.add_argument("--corpus", type=Path, help="folder of Debian WARCs (built if empty)")
    args = parser.parse_args()
    started = time.time()
    with tempfile.TemporaryDirectory() as home:
        os.environ["SHIPYARD_HOME"] = home
        ws = Workspace.open()
        version = export_onnx(ws, import_minilm(ws))
        model = load(ws, version)
        counter = Chunker(model.tokenizer, POLICY, model.window).tokenizer  # no truncation
        rows, planned = corpus_rows(args.chunks, args.corpus, counter)
        snapshot = put_snapshot(ws, iter(rows), name="debian-docs")
        job = prepare(ws, snapshot, version, POLICY, EncodeConfig(), args.shard_seconds)
        queue = open_queue()
        submit(queue, job)
        print(f"{len(rows)} docs, {planned} chunks planned, {len(job.shards)} shards", flush=True)

        procs: list = []
        kills: list[int] = []
        stop = threading.Event()
        chaos = threading.Thread(target=killer, args=(procs, args.kill_every, stop, kills))
        chaos.start()
        embed_started = time.time()
        try:
            done = run_local(
                job,
                args.workers,
                args.lease,
                report=lambda p: print(p.line(), flush=True),
                on_start=procs.append,
            )
        finally:
            stop.set()
            chaos.join()
        # A shard killed more often than its attempts allow is dead-lettered; the operator's
        # move is `shipyard queue requeue`, then the job finishes (no kills meanwhile).
        requeued = queue.requeue(job.queue) if done.dead else 0
        if requeued:
            print(f"{requeued} dead shards requeued", flush=True)
            done = run_local(job, args.workers, args.lease)
        embed_s = time.time() - embed_started

        found: list[tuple[str, int]] = []
        for shard in job.shards:
            table = read_shard(
                shard_path(Path(job.output), job.model, job.snapshot, shard), version
            )
            found += zip(table["doc_id"].to_pylist(), table["chunk_id"].to_pylist(), strict=True)
        want = expected_keys(ws, version, rows)
        lost = len(want - set(found))
        duplicates = len(found) - len(set(found))

        old_index, _ = build(
            ws,
            collect(job),
            IndexConfig(kind="flat", queries=100),
            model=version,
            snapshot=snapshot,
        )
        flip(ws, ALIAS, old_index, min_recall=0.95)
        rng = random.Random(1)
        changed = rng.sample(range(len(rows)), max(1, len(rows) // 100))
        deleted = set(rng.sample(range(len(rows)), max(1, len(rows) // 500))) - set(changed)
        change_rows = [
            (rows[i][0], rows[i][1] + b"\nUpdated after the snapshot.", "upsert") for i in changed
        ]
        change_rows += [(rows[i][0], b"", "delete") for i in deleted]
        change_rows += [(f"new/page-{n}", rows[n][1], "upsert") for n in range(min(50, len(rows)))]
        changes = put_snapshot(ws, change_rows, changes=True, of=snapshot)
        delta = catch_up(ws, queue, job, changes, args.lease)
        new_index, recall = build_index(ws, job, IndexConfig(kind="hnsw"), delta)
        print(f"index {new_index[:16]} recall@10 {recall:.4f}", flush=True)

        service = subprocess.Popen(
            [sys.executable, "-c", SERVE, "batch", "search-serve", ALIAS, "--port", "0"],
            stdout=subprocess.PIPE,
            text=True,
        )
        atexit.register(service.kill)  # even if a step below fails
        assert service.stdout is not None
        url = service.stdout.readline().split()[-1]
        token = read_token(SERVICE, Path(home))
        words = [
            r[1].decode(errors="replace").split()[:12]
            for r in rng.sample(rows, min(200, len(rows)))
        ]
        queries = [" ".join(w) for w in words if w]
        samples: list[tuple[float, float, bool]] = []  # (start, seconds, ok)
        quit_client = threading.Event()

        def client() -> None:
            with httpx.Client(base_url=url, timeout=30) as http:
                while not quit_client.is_set():
                    t0 = time.perf_counter()
                    try:
                        ok = (
                            http.get("/v1/search", params={"q": rng.choice(queries)}).status_code
                            == 200
                        )
                    except httpx.HTTPError:
                        ok = False
                    samples.append((t0, time.perf_counter() - t0, ok))

        querying = threading.Thread(target=client)
        querying.start()
        time.sleep(5.0)  # the "before" window: steady queries on the old index
        flip_start = time.perf_counter()
        with httpx.Client(base_url=url, timeout=120) as admin:
            reply = admin.post(
                "/v1/flip", json={"index": new_index}, headers={"Authorization": f"Bearer {token}"}
            )
        flip_end = time.perf_counter()
        time.sleep(3.0)
        quit_client.set()
        querying.join()
        service.send_signal(signal.SIGTERM)
        service.wait(timeout=30)
        ws.close()

    before = [s * 1000 for t, s, ok in samples if t + s < flip_start and ok]
    during = [s * 1000 for t, s, ok in samples if t + s >= flip_start and t <= flip_end + 1.0]
    failed = sum(1 for _, _, ok in samples if not ok) + (reply.status_code != 200)
    result = {
        "name": "embed_backfill",
        "value": round(p99(during), 2),
        "unit": "p99 query ms during the flip",
        "baseline": round(p99(before), 2),
        "ratio": round(p99(during) / p99(before), 2) if before else None,
        "lost_chunks": lost,
        "duplicate_chunks": duplicates,
        "recall_at_10": round(recall, 4),
        "failed_queries": failed,
        "p99_query_ms_during_flip": round(p99(during), 2),
        "p99_query_ms_before_flip": round(p99(before), 2),
        "queries": len(samples),
        "queries_during_flip": len(during),
        "flip_seconds": round(flip_end - flip_start, 2),
        "chunks": len(found),
        "shards": len(job.shards),
        "workers": args.workers,
        "kills": len(kills),
        "dead_shards_requeued": requeued,
        "embed_seconds": round(embed_s, 1),
        "cpu_s_per_1k_chunks": round(done.cpu_s_per_1k_chunks, 2),
        "total_seconds": round(time.time() - started, 1),
        "load_average": round(os.getloadavg()[0], 1),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
