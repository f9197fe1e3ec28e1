"""A batch worker: claim a shard under a lease, heartbeat it, embed it, commit its output at
f(model, snapshot, shard), complete the item with the shard's counts.

`python -m shipyard.batch.worker QUEUE` runs one until the queue is drained; each claim prints
`claimed shard N attempt A` on stdout so supervisors and tests can follow along.
"""

import argparse
import os
import sys
import time
from collections.abc import Callable
from contextlib import suppress
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from shipyard.batch.chunker import Chunker, ChunkStats
from shipyard.batch.config import ChunkPolicy, EncodeConfig
from shipyard.batch.encoder import embed_blocks
from shipyard.batch.job import Shard
from shipyard.batch.models import LoadedModel, cached, load
from shipyard.batch.shards import commit, shard_path, shard_table
from shipyard.batch.snapshot import CHANGES_FILE, DOCS_FILE, DocTable
from shipyard.errors import InvalidInput, ShipyardError
from shipyard.queue import StaleLease, open_queue
from shipyard.queue.heartbeat import Heartbeat
from shipyard.workspace import Workspace


@lru_cache(maxsize=4)
def _table(path: str) -> DocTable:
    return DocTable(Path(path))


_models: dict[str, LoadedModel] = {}


def docs_file(ws: Workspace, ref: str) -> Path:
    """The documents of a snapshot or change log artifact (materialized once)."""
    folder = cached(ws, ref)
    for name in (DOCS_FILE, CHANGES_FILE):
        if (folder / name).is_file():
            return folder / name
    raise InvalidInput(f"{ref!r} is not a corpus snapshot or change log (no {DOCS_FILE})")


def _model(ws: Workspace, version: str) -> LoadedModel:
    if version not in _models:
        _models[version] = load(ws, version)
    return _models[version]


def embed_shard(ws: Workspace, payload: dict[str, Any]) -> dict[str, Any]:
    """Do one shard and commit it; returns its counts and costs (the item's result)."""
    try:
        index, start, end = (int(x) for x in payload["shard"])
        snapshot, version = str(payload["snapshot"]), str(payload["model"])
        policy = ChunkPolicy.from_json(payload["policy"])
        config = EncodeConfig.from_json(payload["encode"])
        output = Path(payload["output"])
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidInput(f"batch shard payload: {exc!r}") from None
    wall, cpu = time.perf_counter(), time.process_time()
    table = _table(str(docs_file(ws, snapshot)))
    model = _model(ws, version)
    chunker = Chunker(model.tokenizer, policy, model.window)
    stats = ChunkStats()
    doc_ids: list[str] = []
    chunk_ids: list[int] = []
    parts: list[np.ndarray] = []
    blocks = (
        list(table.docs(s, min(s + config.block_docs, end)))
        for s in range(start, end, config.block_docs)
    )
    for chunked, vectors in embed_blocks(blocks, chunker, model.backend, config, model.dim):
        stats.add(chunked.stats)
        doc_ids += chunked.doc_ids
        chunk_ids += chunked.chunk_ids
        parts.append(vectors)
    vectors = np.concatenate(parts) if parts else np.zeros((0, model.dim), np.float32)
    commit(
        shard_table(doc_ids, chunk_ids, vectors, version),
        shard_path(output, version, snapshot, Shard(index, start, end)),
    )
    return {
        **stats.to_json(),
        "shard": index,
        "seconds": round(time.perf_counter() - wall, 4),
        "cpu_seconds": round(time.process_time() - cpu, 4),
    }


def drain(
    queue_name: str,
    lease: float = 60.0,
    max_items: int | None = None,
    say: Callable[[str], None] = print,
) -> int:
    """Claim and do shards until none is left unfinished; returns how many this worker did."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    queue = open_queue()
    ws = Workspace.open()
    done = 0
    try:
        while max_items is None or done < max_items:
            claimed = queue.claim(queue_name, n=1, lease=lease)
            if not claimed:
                (stats,) = queue.stats(queue_name)
                if stats.ready + stats.waiting + stats.leased == 0:
                    return done
                queue.wait(queue_name, min(1.0, lease / 4))  # a lease may yet expire
                continue
            item = claimed[0]
            say(f"claimed shard {item.payload['shard'][0]} attempt {item.attempt}")
            beat = Heartbeat(queue, [item], lease)
            try:
                result = embed_shard(ws, item.payload)
            except ShipyardError as exc:
                beat.stop()
                with suppress(StaleLease):  # another worker holds it now: its outcome stands
                    queue.fail(item.id, item.token, str(exc))
                say(f"failed shard {item.payload['shard'][0]}: {exc}")
                continue
            beat.stop()
            try:
                queue.complete(item.id, item.token, result=result)
            except StaleLease as exc:  # a zombie: our identical output is harmless
                say(f"shard {result['shard']} done by another worker meanwhile: {exc}")
                continue
            done += 1
    finally:
        queue.close()
        ws.close()
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shipyard.batch.worker")
    parser.add_argument("queue")
    parser.add_argument("--lease", type=float, default=60.0)
    parser.add_argument("--max-items", type=int)
    args = parser.parse_args(argv)
    try:
        drain(args.queue, args.lease, args.max_items, say=lambda s: print(s, flush=True))
    except ShipyardError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
