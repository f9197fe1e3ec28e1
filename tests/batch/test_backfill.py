"""The shard protocol end to end on the real queue (SQLite) with a tiny real encoder."""

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from shipyard.batch import build_index, catch_up, put_snapshot, shard_path, submit
from shipyard.batch.executors import WORKER_ENV, worker_command
from shipyard.batch.index import collect
from shipyard.batch.worker import drain, embed_shard
from shipyard.errors import IntegrityError
from shipyard.queue import open_queue

from .conftest import Backfill, make_tiny_encoder


def _run(job) -> None:  # type: ignore[no-untyped-def]
    queue = open_queue()
    submit(queue, job)
    drain(job.queue, lease=30, say=lambda _: None)
    queue.close()


def test_bad_input_is_counted_and_long_documents_are_chunked(backfill: Backfill) -> None:
    job = backfill.job()
    _run(job)
    queue = open_queue()
    results = [i.result for i in queue.items(job.queue, "done", limit=100)]
    assert sum(r["empty"] for r in results) == 1
    assert sum(r["non_utf8"] for r in results) == 1
    assert sum(r["long_docs"] for r in results) > 0
    vectors = collect(job)
    docs = {d for d in vectors.doc_ids}
    assert "empty-doc" not in docs and "latin1-doc" not in docs
    assert len(docs) == 120  # every real document has vectors, long ones in several chunks
    assert max(vectors.chunk_ids) >= 3  # 150 words in 28-token steps


def test_a_shard_committed_twice_yields_one_copy(backfill: Backfill) -> None:
    job = backfill.job()
    payload = job.payload(job.shards[0])
    path = shard_path(Path(job.output), job.model, job.snapshot, job.shards[0])
    embed_shard(backfill.ws, payload)
    first = path.read_bytes()
    embed_shard(backfill.ws, payload)  # a zombie finishing the same shard late
    assert path.read_bytes() == first
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]
    _run(job)
    vectors = collect(job)
    keys = list(zip(vectors.doc_ids, vectors.chunk_ids, strict=True))
    assert len(keys) == len(set(keys))


def test_a_new_model_version_writes_new_paths_and_never_mixes(
    backfill: Backfill, tmp_path: Path
) -> None:
    other = backfill.ws.put(make_tiny_encoder(tmp_path / "v2", seed=1), "model").id
    old, new = backfill.job(), backfill.job(model=other)
    _run(old)
    _run(new)
    old_path = shard_path(Path(old.output), old.model, old.snapshot, old.shards[0])
    new_path = shard_path(Path(new.output), new.model, new.snapshot, new.shards[0])
    assert old_path != new_path and old_path.exists() and new_path.exists()
    assert set(collect(new).doc_ids) == set(collect(old).doc_ids)
    # A file of the old version where the new one's should be is refused, not merged.
    new_path.write_bytes(old_path.read_bytes())
    with pytest.raises(IntegrityError, match="refusing to mix model versions"):
        collect(new)


def test_onnx_export_matches_and_is_a_separate_version(backfill: Backfill) -> None:
    st, onnx = backfill.job("sentence-transformers"), backfill.job("onnx")
    assert onnx.model != st.model
    record = backfill.ws.catalog.get_artifact(onnx.model)
    assert record is not None and record.metadata["source_model"] == st.model
    assert record.metadata["max_abs_diff"] <= 1e-4
    assert backfill.job("onnx").model == onnx.model  # exported once, then found
    _run(st)
    _run(onnx)
    a, b = collect(st), collect(onnx)
    assert a.doc_ids == b.doc_ids
    assert abs(a.matrix - b.matrix).max() < 1e-4


def test_catch_up_replaces_changed_and_deleted_documents(backfill: Backfill) -> None:
    job = backfill.job()
    _run(job)
    changes = put_snapshot(
        backfill.ws,
        [
            ("doc-0001", b"rewritten text", "upsert"),
            ("doc-0002", b"", "delete"),
            ("doc-new", b"a new page", "upsert"),
        ],
        changes=True,
        of=job.snapshot,
    )
    queue = open_queue()
    delta = catch_up(backfill.ws, queue, job, changes, lease=30)
    index_id, _ = build_index(backfill.ws, job, changes=delta)
    rows = backfill.ws.catalog.get_artifact(index_id)
    assert rows is not None and rows.metadata["changes"] == changes
    from shipyard.batch.search import Loader

    loaded = Loader().load(backfill.ws, index_id)
    assert "doc-0002" not in loaded.doc_ids and "doc-new" in loaded.doc_ids
    assert loaded.doc_ids.count("doc-0001") == 1  # "rewritten text" is one chunk
    assert len(collect(job).doc_ids) - len(loaded.doc_ids) == (
        collect(job).doc_ids.count("doc-0001") + collect(job).doc_ids.count("doc-0002") - 2
    )


def test_a_sigkilled_workers_shard_is_redone_with_no_loss_or_duplicate(
    backfill: Backfill,
) -> None:
    job = backfill.job("onnx", docs_per_shard=8)
    queue = open_queue()
    submit(queue, job)
    env = {**os.environ, **WORKER_ENV}
    victim = subprocess.Popen(
        worker_command(job, lease=1.5), env=env, stdout=subprocess.PIPE, text=True
    )
    assert victim.stdout is not None
    claims = 0
    while claims < 2:  # mid-job, holding a lease
        line = victim.stdout.readline()
        assert line, "the worker ended before claiming twice"
        claims += line.startswith("claimed shard")
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    deadline = time.monotonic() + 600  # generous: a loaded machine is slow, not wrong
    while time.monotonic() < deadline:  # the rescuer runs until every shard is done
        drain(job.queue, lease=5, say=lambda _: None)
        (stats,) = queue.stats(job.queue)
        if stats.done == len(job.shards):
            break
    history = [a for item in queue.items(job.queue, limit=100) for a in queue.get(item.id).history]
    assert any(a.outcome == "expired" for a in history), "the killed lease was never reclaimed"
    vectors = collect(job)
    keys = list(zip(vectors.doc_ids, vectors.chunk_ids, strict=True))
    assert len(keys) == len(set(keys))
    reference = backfill.job("onnx", docs_per_shard=200)  # one shard, one worker, no kill
    _run(reference)
    whole = collect(reference)
    assert sorted(keys) == sorted(zip(whole.doc_ids, whole.chunk_ids, strict=True))


@pytest.mark.slow
@pytest.mark.timeout(1800)  # Ray's start-up alone can take minutes on a loaded machine
def test_ray_tasks_follow_the_same_shard_protocol(backfill: Backfill) -> None:
    ray = pytest.importorskip("ray")
    from shipyard.batch import run_ray

    job = backfill.job()
    submit(open_queue(), job)
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        done = run_ray(job, workers=1, lease=30)
    finally:
        ray.shutdown()
    assert done.done == len(job.shards) and done.dead == 0
    assert len(set(collect(job).doc_ids)) == 120
