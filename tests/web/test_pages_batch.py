"""The console's batch page and API show a job submitted through `batch.submit` as its shards
complete on the real work queue."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.web.conftest import BASE

from shipyard.batch import ChunkPolicy, EncodeConfig, Job, Shard, submit
from shipyard.db import database_url
from shipyard.queue import open_queue
from shipyard.web import Console, create_app


@pytest.fixture
def bare(console: Console) -> Iterator[TestClient]:
    with TestClient(create_app(console), base_url=BASE) as client:
        yield client


def test_job_progress_eta_and_cost(bare: TestClient, home: Path) -> None:
    shards = tuple(Shard(n, n * 10, n * 10 + 10) for n in range(4))
    job = Job("s" * 64, "m" * 64, ChunkPolicy(), EncodeConfig(), str(home / "out"), shards)
    queue = open_queue(database_url(home))
    submit(queue, job)
    (item,) = queue.claim(job.queue)
    queue.complete(item.id, item.token, {"docs": 10, "chunks": 40, "cpu_seconds": 2.0, "empty": 1})
    queue.claim(job.queue)  # a second shard in flight
    queue.close()

    reply = bare.get("/api/batch/jobs").json()
    (line,) = reply["jobs"]
    assert line["job"] == job.id and line["state"] == "running"
    assert (line["done"], line["running"], line["shards"], line["chunks"]) == (1, 1, 4, 40)
    assert line["cpu_s_per_1k_chunks"] == pytest.approx(50.0)
    assert line["eta_s"] is not None and line["eta_s"] >= 0
    assert line["problems"]["empty"] == 1
    page = bare.get("/batch").text
    assert "1/4 (1 running, 0 dead)" in page and "50.0" in page and "empty 1" in page


def test_batch_empty(bare: TestClient) -> None:
    assert bare.get("/api/batch/jobs").json()["jobs"] == []
    assert "no batch jobs" in bare.get("/batch").text
