"""A backfill job: (snapshot, model version, chunking policy, output spec), its shards sized from a
measured rate, and their submission to the work queue, one item per shard keyed by its number."""

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shipyard.batch.chunker import Chunker
from shipyard.batch.config import ChunkPolicy, EncodeConfig
from shipyard.batch.encoder import encode
from shipyard.batch.models import LoadedModel
from shipyard.batch.snapshot import DocTable
from shipyard.errors import InvalidInput, NotFound
from shipyard.home import shipyard_home
from shipyard.queue import Queue


@dataclass(frozen=True)
class Shard:
    index: int
    start: int  # first document (position in the snapshot)
    end: int  # one past the last


@dataclass(frozen=True)
class Job:
    snapshot: str  # artifact id of the corpus snapshot
    model: str  # artifact id of the weights that run (the model version)
    policy: ChunkPolicy
    encode: EncodeConfig
    output: str  # folder that holds <model>/<snapshot>/shard-NNNNN.parquet
    shards: tuple[Shard, ...] = field(default=())
    max_attempts: int = 10  # shards are idempotent: kills spend attempts, not correctness

    @property
    def id(self) -> str:
        return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode()).hexdigest()

    @property
    def queue(self) -> str:
        return f"batch-{self.id[:16]}"

    def to_json(self) -> dict[str, Any]:
        return {
            "snapshot": self.snapshot,
            "model": self.model,
            "policy": self.policy.to_json(),
            "encode": self.encode.to_json(),
            "output": self.output,
            "shards": [[s.index, s.start, s.end] for s in self.shards],
            "max_attempts": self.max_attempts,
        }

    @classmethod
    def from_json(cls, data: Any) -> "Job":
        try:
            return cls(
                str(data["snapshot"]),
                str(data["model"]),
                ChunkPolicy.from_json(data["policy"]),
                EncodeConfig.from_json(data["encode"]),
                str(data["output"]),
                tuple(Shard(int(i), int(s), int(e)) for i, s, e in data["shards"]),
                int(data["max_attempts"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInput(f"batch job record: {exc!r}") from None

    def payload(self, shard: Shard) -> dict[str, Any]:
        """What a worker needs for one shard, whole: workers share nothing else."""
        spec = {k: v for k, v in self.to_json().items() if k != "shards"}
        return {**spec, "job": self.id, "shard": [shard.index, shard.start, shard.end]}


@dataclass(frozen=True)
class Rate:
    chunks_per_doc: float
    chunks_per_s: float  # on one worker (one thread)


def measure_rate(
    model: LoadedModel, table: DocTable, policy: ChunkPolicy, config: EncodeConfig, sample: int = 64
) -> Rate:
    """Encode `sample` documents spread over the snapshot and time them on this thread."""
    step = max(1, len(table) // sample)
    docs = [doc for i in range(0, len(table), step) for doc in table.docs(i, i + 1)][:sample]
    chunked = Chunker(model.tokenizer, policy, model.window).chunk(docs)
    if not chunked.ids:
        return Rate(1.0, 1.0)
    started = time.perf_counter()
    encode(model.backend, chunked.ids, config, model.dim)
    elapsed = max(time.perf_counter() - started, 1e-6)
    return Rate(len(chunked.ids) / max(len(docs), 1), len(chunked.ids) / elapsed)


def plan_shards(num_docs: int, rate: Rate, target_s: float) -> tuple[Shard, ...]:
    """Contiguous document ranges of about `target_s` seconds of one worker's time each."""
    if not target_s > 0:
        raise InvalidInput(f"shard target must be more than 0 seconds, not {target_s}")
    per_shard = max(1, int(target_s * rate.chunks_per_s / max(rate.chunks_per_doc, 1e-9)))
    return tuple(
        Shard(n, start, min(start + per_shard, num_docs))
        for n, start in enumerate(range(0, num_docs, per_shard))
    )


def jobs_dir() -> Path:
    return shipyard_home() / "batch" / "jobs"


def save(job: Job) -> Path:
    path = jobs_dir() / f"{job.id}.json"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(f".{path.name}.{os.getpid()}")
        temp.write_text(json.dumps({**job.to_json(), "created_at": time.time()}))
        os.replace(temp, path)
    return path


def load_job(ref: str) -> Job:
    """A saved job by its id or a unique prefix of it."""
    matches = sorted(jobs_dir().glob(f"{ref}*.json")) if ref.isalnum() else []
    if len(matches) != 1:
        raise NotFound(f"batch job {ref!r}: {'ambiguous' if matches else 'no such job'}")
    try:
        return Job.from_json(json.loads(matches[0].read_text()))
    except ValueError:
        raise InvalidInput(f"{matches[0]}: not a job record") from None


def submit(queue: Queue, job: Job) -> int:
    """Save the job and put one item per shard on its queue (again: a no-op); returns new items."""
    save(job)
    queue.create(job.queue, max_attempts=job.max_attempts)
    added = queue.enqueue_many(
        job.queue,
        [job.payload(s) for s in job.shards],
        keys=[f"shard-{s.index:05d}" for s in job.shards],
    )
    return sum(1 for _, new in added if new)
