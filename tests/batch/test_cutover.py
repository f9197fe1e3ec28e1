"""The recall gate, flips and rollback: in the catalog, and through the real search service
over a real socket while a client queries."""

import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from shipyard.batch import IndexConfig, build_index, check_gate, flip, submit
from shipyard.batch.index import Vectors, build
from shipyard.batch.service import SERVICE, Searcher, create_app
from shipyard.batch.worker import drain
from shipyard.errors import Conflict
from shipyard.httpguard import Guard
from shipyard.httpguard.asgi import start_server
from shipyard.queue import open_queue
from shipyard.workspace import Workspace

from .conftest import Backfill, make_tiny_encoder


def _clustered(rows: int, dim: int, seed: int) -> Vectors:
    rng = np.random.default_rng(seed)
    matrix = rng.standard_normal((rows, dim)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    return Vectors([f"d{i}" for i in range(rows)], [0] * rows, matrix)


def test_recall_below_the_threshold_blocks_the_flip(workspace: Workspace, tmp_path: Path) -> None:
    (tmp_path / "inputs").mkdir()
    (tmp_path / "inputs" / "x").write_text("x")
    m = s = workspace.put(tmp_path / "inputs", "dataset").id  # lineage needs real inputs
    vectors = _clustered(4000, 16, seed=1)
    good, good_recall = build(
        workspace, vectors, IndexConfig(kind="hnsw", queries=200), model=m, snapshot=s
    )
    poor, poor_recall = build(
        workspace,
        vectors,
        IndexConfig(kind="ivf", ivf_lists=64, ivf_probe=1, queries=200),
        model=m,
        snapshot=s,
    )
    assert good_recall >= 0.95 > poor_recall
    flip(workspace, "serving", good, min_recall=0.95)
    with pytest.raises(Conflict, match="below the threshold"):
        flip(workspace, "serving", poor, min_recall=0.95)
    assert workspace.catalog.get_alias("serving") == good  # nothing moved
    assert check_gate(workspace, poor, min_recall=poor_recall) == poor


def _index(backfill: Backfill, model: str) -> str:
    job = backfill.job(model=model)
    queue = open_queue()
    submit(queue, job)
    drain(job.queue, lease=30, say=lambda _: None)
    queue.close()
    index_id, _ = build_index(backfill.ws, job, IndexConfig(kind="flat", queries=50))
    return index_id


def test_flip_under_queries_then_rollback_restores_the_old_index(
    backfill: Backfill, shipyard_home: Path, tmp_path: Path
) -> None:
    # A re-embedding with a new model: the new index needs the new encoder, loaded before the swap.
    newer = backfill.ws.put(make_tiny_encoder(tmp_path / "v2", seed=7), "model").id
    old, new = _index(backfill, backfill.model), _index(backfill, newer)
    flip(backfill.ws, "docs-search", old, min_recall=0.95)
    guard = Guard.start(SERVICE, shipyard_home, "127.0.0.1")
    server = start_server(create_app(Searcher("docs-search", 0.95), guard), "127.0.0.1", 0, "t")
    base = f"http://127.0.0.1:{server.port}"
    auth = {"Authorization": f"Bearer {guard.token}"}
    seen: list[str] = []
    failures: list[str] = []
    stop = threading.Event()

    def query() -> None:
        with httpx.Client(base_url=base, timeout=300) as client:  # slow under load, not wrong
            while not stop.is_set():
                reply = client.get("/v1/search", params={"q": "debian package index", "k": 5})
                if reply.status_code != 200 or len(reply.json()["hits"]) != 5:
                    failures.append(reply.text)
                else:
                    seen.append(reply.json()["index"])

    client_thread = threading.Thread(target=query)
    client_thread.start()
    try:
        with httpx.Client(base_url=base, timeout=300) as admin:
            assert admin.post("/v1/flip", json={"index": new}).status_code == 401  # no token
            reply = admin.post("/v1/flip", json={"index": new}, headers=auth)
            assert reply.status_code == 200, reply.text
            assert reply.json() == {"alias": "docs-search", "from": old, "to": new}
            assert backfill.ws.catalog.get_alias("docs-search") == new
            deadline = time.monotonic() + 300
            while seen.count(new) < 3:  # answers come from the new index
                assert time.monotonic() < deadline, "no query answered from the new index"
                stop.wait(0.01)
            reply = admin.post("/v1/rollback", json={}, headers=auth)
            assert reply.status_code == 200, reply.text
            assert admin.get("/v1/index").json()["current"] == old
            bad = admin.get("/v1/search", params={"q": "x" * 5000})
            assert bad.status_code == 400 and "characters" in bad.json()["error"]
            long = admin.get("/v1/search", params={"q": "apt " * 200})  # 202 tokens > 128
            assert long.status_code == 400 and "never silently truncated" in long.json()["error"]
    finally:
        stop.set()
        client_thread.join()
        server.stop()
    assert failures == []
    assert backfill.ws.catalog.get_alias("docs-search") == old
    assert seen[0] == old and new in seen and seen[-1] == old
