"""How far a job has got, when it will end, and what it costs: from the queue's own records."""

import time
from dataclasses import dataclass

from shipyard.batch.job import Job, jobs_dir
from shipyard.queue import Queue

# A GPU figure to compare with, cited, not measured here: the sentence-transformers pretrained
# models table (sbert.net) gives all-MiniLM-L6-v2 14,200 sentences/s on one V100. Those are short
# sentences; 128-token chunks are slower, so this estimate is a floor on GPU cost.
GPU_CHUNKS_PER_S = 14_200.0
GPU_SOURCE = "sbert.net pretrained-models table: all-MiniLM-L6-v2, 14,200 sentences/s on a V100"


@dataclass(frozen=True)
class Progress:
    shards: int
    done: int
    dead: int
    leased: int
    docs: int
    chunks: int
    problems: dict[str, int]
    cpu_seconds: float
    elapsed_s: float
    eta_s: float | None  # None until a shard is done

    @property
    def cpu_s_per_1k_chunks(self) -> float:
        return 1000.0 * self.cpu_seconds / self.chunks if self.chunks else 0.0

    @property
    def gpu_s_per_1k_chunks(self) -> float:
        return 1000.0 / GPU_CHUNKS_PER_S

    def line(self) -> str:
        eta = "?" if self.eta_s is None else f"{self.eta_s:.0f}s"
        problems = ", ".join(f"{k} {v}" for k, v in self.problems.items() if v) or "none"
        return (
            f"{self.done}/{self.shards} shards ({self.leased} running, {self.dead} dead), "
            f"{self.chunks} chunks from {self.docs} docs, ETA {eta}; "
            f"{self.cpu_s_per_1k_chunks:.1f} CPU-s per 1,000 chunks "
            f"(GPU estimate {self.gpu_s_per_1k_chunks:.3f} GPU-s); bad input: {problems}"
        )


def progress(queue: Queue, job: Job, started: float | None = None) -> Progress:
    (stats,) = queue.stats(job.queue)
    done_items = queue.items(job.queue, "done", limit=max(1, len(job.shards)))
    results = [i.result for i in done_items if isinstance(i.result, dict)]
    count = {k: sum(int(r.get(k, 0)) for r in results) for k in ("docs", "chunks")}
    problems = {
        k: sum(int(r.get(k, 0)) for r in results)
        for k in ("empty", "non_utf8", "long_docs", "deleted")
    }
    cpu = sum(float(r.get("cpu_seconds", 0.0)) for r in results)
    if started is None:
        path = jobs_dir() / f"{job.id}.json"
        started = path.stat().st_mtime if path.exists() else time.time()
    elapsed = time.time() - started
    total_docs = sum(s.end - s.start for s in job.shards)
    eta = None
    if count["docs"]:
        eta = elapsed * (total_docs - count["docs"]) / count["docs"]
    return Progress(
        len(job.shards),
        stats.done,
        stats.dead,
        stats.leased,
        count["docs"],
        count["chunks"],
        problems,
        cpu,
        elapsed,
        eta,
    )
