"""One task: one WARC file through every per-document stage, each stage's output cached.

A stage's output for a file lives at `<cache>/<stage>/<key>/` where the key hashes the stage's
name and version, its config section and the key of its input (the file's SHA-256 for `read`).
Outputs are written to a temporary folder and renamed into place, so a killed task leaves either
nothing or a whole output; a re-run starts after the last committed stage, and a changed config
section re-runs only that stage and the ones after it.
"""

import hashlib
import json
import os
import shutil
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import shipyard
from shipyard.data.batch import Batch, Quarantine, from_table, num_rows, to_table
from shipyard.data.config import PipelineConfig
from shipyard.data.guard import RecordGuard
from shipyard.data.stages import DOC_STAGES, get_stage
from shipyard.data.stages.read import read_warc
from shipyard.hashing import canonical_json, sha256_hex

READ_VERSION = "1"


@dataclass(frozen=True)
class FileTask:
    path: str
    file_hash: str
    config: PipelineConfig
    cache: str


@dataclass(frozen=True)
class TaskResult:
    path: str
    output: str  # folder of the last stage's committed output
    computed: tuple[str, ...]  # stages this attempt ran (empty: everything was cached)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def stage_keys(config: PipelineConfig, file_hash: str) -> list[tuple[str, str]]:
    """(stage, key) for `read` and each document stage, each key chained from the one before."""
    keys = []
    key = file_hash
    chain = [("read", READ_VERSION, config.section_hash("read"))] + [
        (name, stage.version, config.section_hash(stage.section, stage.fields))
        for name, stage in ((name, get_stage(name)) for name in DOC_STAGES)
    ]
    # decontamination depends on the benchmark files' contents, not only on their paths
    benchmarks = [file_sha256(Path(p)) for p in config.decontam.benchmarks if Path(p).is_file()]
    for name, version, section_hash in chain:
        material = [name, shipyard.__version__, version, section_hash, key]
        if name == "decontam":
            material += benchmarks
        key = sha256_hex(canonical_json(material))[:32]
        keys.append((name, key))
    return keys


def output_dir(cache: str, stage: str, key: str) -> Path:
    return Path(cache, stage, key)


def run_task(task: FileTask) -> TaskResult:
    keys = stage_keys(task.config, task.file_hash)
    dirs = [output_dir(task.cache, stage, key) for stage, key in keys]
    done = max((i for i, d in enumerate(dirs) if d.is_dir()), default=-1)
    if done == len(dirs) - 1:
        return TaskResult(task.path, str(dirs[-1]), ())
    source = Path(task.path).name
    computed = []
    guard = RecordGuard(Path(task.cache) / ".guard", keys[-1][1])
    try:
        if done < 0:
            quarantine = Quarantine(source)
            batch = read_warc(Path(task.path), task.config.read, quarantine)
            _commit(dirs[0], batch, quarantine, {})
            computed.append("read")
            done = 0
        else:
            batch = from_table(pq.read_table(dirs[done] / "data.parquet"))
        for index in range(done + 1, len(keys)):
            name = keys[index][0]
            quarantine = Quarantine(source, guard=guard)
            rows_in = num_rows(batch)
            batch = get_stage(name)(task.config).process(batch, quarantine)
            _commit(dirs[index], batch, quarantine, {"rows_in": rows_in})
            computed.append(name)
    except BaseException:
        guard.close(task_done=False)
        raise
    guard.close(task_done=True)
    return TaskResult(task.path, str(dirs[-1]), tuple(computed))


def _commit(final: Path, batch: Batch, quarantine: Quarantine, stats: dict[str, Any]) -> None:
    tmp = final.parent / f".tmp-{final.name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    pq.write_table(to_table(batch), tmp / "data.parquet", compression="zstd")
    pq.write_table(quarantine.table(), tmp / "quarantine.parquet")
    stats = {**stats, "rows_out": num_rows(batch), "policy": dict(quarantine.policy)}
    if quarantine.seen:
        stats["records_seen"] = quarantine.seen
    (tmp / "stats.json").write_text(json.dumps(stats, sort_keys=True))
    try:
        os.rename(tmp, final)
    except OSError:  # another attempt committed the same output first: theirs is identical
        shutil.rmtree(tmp, ignore_errors=True)


@dataclass(frozen=True)
class FileChain:
    """What a file's committed stages set aside: quarantined records, policy drops by rule, and
    how many records the reader met."""

    quarantine: pa.Table
    policy: Counter[str]
    seen: int


def read_chain(config: PipelineConfig, file_hash: str, cache: str) -> FileChain:
    tables = []
    policy: Counter[str] = Counter()
    seen = 0
    for stage, key in stage_keys(config, file_hash):
        folder = output_dir(cache, stage, key)
        if folder.is_dir():
            tables.append(pq.read_table(folder / "quarantine.parquet"))
            stats = json.loads((folder / "stats.json").read_text())
            policy.update(stats["policy"])
            seen += stats.get("records_seen", 0)
    table = pa.concat_tables(tables) if tables else Quarantine("").table()
    return FileChain(table, policy, seen)
