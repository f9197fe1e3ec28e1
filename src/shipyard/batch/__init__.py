"""Sharded batch inference: embedding backfills, index build, zero-downtime cut-over.

A job embeds a corpus snapshot with one model version under one chunking policy; its shards go
through the work queue under leases and commit Parquet outputs at f(model, snapshot, shard).
`build_index` gathers them (with a change log's catch-up merged), measures recall@10 against
exact search and stores the index as an artifact; `flip` moves a serving alias only past the
recall gate, and `shipyard batch search-serve` swaps indexes with no failed query.
"""

from shipyard.batch.backfill import build_index, catch_up, files_of, prepare, put_snapshot
from shipyard.batch.config import ChunkPolicy, EncodeConfig, IndexConfig
from shipyard.batch.cutover import check_gate, flip, previous_target
from shipyard.batch.executors import run_local, run_ray
from shipyard.batch.job import Job, Rate, Shard, load_job, submit
from shipyard.batch.models import export_onnx, import_minilm
from shipyard.batch.progress import Progress, progress
from shipyard.batch.shards import shard_path

__all__ = [
    "ChunkPolicy",
    "EncodeConfig",
    "IndexConfig",
    "Job",
    "Progress",
    "Rate",
    "Shard",
    "build_index",
    "catch_up",
    "check_gate",
    "export_onnx",
    "files_of",
    "flip",
    "import_minilm",
    "load_job",
    "prepare",
    "previous_target",
    "progress",
    "put_snapshot",
    "run_local",
    "run_ray",
    "shard_path",
    "submit",
]
