"""The steps of a backfill as calls: make a snapshot, prepare a job (model version chosen,
shards planned from a measured rate), catch up a change log, build the index with the changes
merged."""

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from shipyard.batch.config import ChunkPolicy, EncodeConfig, IndexConfig
from shipyard.batch.index import Vectors, build, changed_doc_ids, collect, merge
from shipyard.batch.job import Job, Rate, Shard, measure_rate, plan_shards, submit
from shipyard.batch.models import export_onnx, load
from shipyard.batch.shards import outputs_root
from shipyard.batch.snapshot import (
    CHANGES_TABLE,
    SNAPSHOT_TABLE,
    DocTable,
    write_docs,
)
from shipyard.batch.worker import docs_file, drain
from shipyard.errors import InvalidInput
from shipyard.queue import Queue
from shipyard.workspace import Workspace

MAX_FILE_BYTES = 64 << 20
HTML_SUFFIXES = (".html", ".htm")
DEFAULT_POLICY = ChunkPolicy()
DEFAULT_ENCODE = EncodeConfig()
DEFAULT_INDEX = IndexConfig()


def files_of(folder: Path) -> Iterator[tuple[str, bytes]]:
    """(relative path, bytes) of every regular file under `folder`, in path order. HTML pages
    become their main text (resiliparse); other files are kept as their bytes."""
    if not folder.is_dir():
        raise InvalidInput(f"{folder}: not a directory")
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()):
        if path.stat().st_size > MAX_FILE_BYTES:
            raise InvalidInput(f"{path}: over {MAX_FILE_BYTES >> 20} MiB; not a document")
        raw = path.read_bytes()
        if path.suffix.lower() in HTML_SUFFIXES:
            raw = html_text(raw)
        yield str(path.relative_to(folder)), raw


def html_text(raw: bytes) -> bytes:
    """Main text of a page; bytes that are not UTF-8 stay as they are (and are counted later)."""
    try:
        page = raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw
    from resiliparse.extract.html2text import extract_plain_text

    return str(extract_plain_text(page, main_content=True)).encode()


def put_snapshot(
    ws: Workspace,
    rows: Iterator[tuple[str, bytes]] | list[tuple[str, bytes, str]],
    name: str | None = None,
    changes: bool = False,
    of: str | None = None,
) -> str:
    """Store documents as a snapshot (or as a change log of snapshot `of`); returns its id."""
    with tempfile.TemporaryDirectory(prefix="shipyard-snapshot-") as tmp:
        count = write_docs(rows, Path(tmp), changes=changes)
        record = ws.put(
            Path(tmp),
            "dataset",
            name=name,
            inputs=[of] if of else [],
            metadata={"table": CHANGES_TABLE if changes else SNAPSHOT_TABLE, "docs": count},
        )
    return record.id


def model_version(ws: Workspace, model_ref: str, runtime: str) -> str:
    """The artifact whose weights will run: an ONNX export (made once) or the original."""
    model = ws.resolve(model_ref)
    record = ws.catalog.get_artifact(model)
    if runtime == "sentence-transformers" or (record and record.metadata.get("format") == "onnx"):
        return model
    return export_onnx(ws, model, int8=runtime == "onnx-int8")


def prepare(
    ws: Workspace,
    snapshot_ref: str,
    model_ref: str,
    policy: ChunkPolicy = DEFAULT_POLICY,
    config: EncodeConfig = DEFAULT_ENCODE,
    shard_seconds: float = 300.0,
    output: Path | None = None,
    rate: Rate | None = None,
) -> Job:
    """A job whose shards each take about `shard_seconds` of one worker, from a rate measured
    on a sample of the snapshot (or `rate`, when known)."""
    snapshot = ws.resolve(snapshot_ref)
    version = model_version(ws, model_ref, config.runtime)
    table = DocTable(docs_file(ws, snapshot))
    if rate is None:
        rate = measure_rate(load(ws, version), table, policy, config)
    shards = plan_shards(len(table), rate, shard_seconds)
    return Job(snapshot, version, policy, config, str(output or outputs_root()), shards)


def catch_up(ws: Workspace, queue: Queue, base: Job, changes_ref: str, lease: float = 60.0) -> Job:
    """Embed the change log with the base job's model and policy as a one-shard job, here."""
    changes = ws.resolve(changes_ref)
    table = DocTable(docs_file(ws, changes))
    job = Job(
        changes, base.model, base.policy, base.encode, base.output, (Shard(0, 0, len(table)),)
    )
    submit(queue, job)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    drain(job.queue, lease, say=lambda _: None)
    return job


def build_index(
    ws: Workspace,
    base: Job,
    config: IndexConfig = DEFAULT_INDEX,
    changes: Job | None = None,
    name: str | None = None,
) -> tuple[str, float]:
    """The serving index of `base` with `changes` merged in; returns (id, recall@10)."""
    vectors: Vectors = collect(base)
    if changes is not None:
        if changes.model != base.model:
            raise InvalidInput("the change log was embedded with another model version")
        delta = collect(changes) if _has_rows(changes) else None
        vectors = merge(vectors, changed_doc_ids(ws, changes.snapshot), delta)
    return build(
        ws,
        vectors,
        config,
        model=base.model,
        snapshot=base.snapshot,
        changes=changes.snapshot if changes else None,
        name=name,
    )


def _has_rows(job: Job) -> bool:
    from shipyard.batch.shards import read_shard, shard_path

    return any(
        read_shard(shard_path(Path(job.output), job.model, job.snapshot, s), job.model).num_rows
        for s in job.shards
    )
