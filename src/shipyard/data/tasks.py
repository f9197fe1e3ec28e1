"""One task: one WARC file through every per-document stage, each stage's output cached.

A stage's output for a file lives at `<cache>/<stage>/<key>/` where the key hashes the stage's
name and version, its config section and the key of its input (the file's SHA-256 for `read`).
Outputs are written to a temporary folder and renamed into place, so a killed task leaves either
nothing or a whole output; a re-run starts after the last committed stage, and a changed config
section re-runs only that stage and the ones after it.
"""

import contextlib
import hashlib
import json
import os
import resource
import shutil
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import shipyard
from shipyard.data.batch import Batch, Quarantine, from_table, num_rows, to_table
from shipyard.data.config import PipelineConfig
from shipyard.data.guard import RecordGuard
from shipyard.data.journal import Journal
from shipyard.data.stages import DOC_STAGES, get_stage
from shipyard.data.stages.read import SLICE_BYTES, SLICE_ROWS, SliceReader
from shipyard.hashing import canonical_json, sha256_hex

READ_VERSION = "1"


@dataclass(frozen=True)
class FileTask:
    path: str
    file_hash: str
    config: PipelineConfig
    cache: str
    run: str = ""  # the pipeline run: a timeout holds within it, and is tried again after


@dataclass(frozen=True)
class TaskResult:
    path: str
    output: str  # folder of the last stage's committed output
    computed: tuple[str, ...]  # stages this attempt ran (empty: everything was cached)
    peak_rss: int = 0  # bytes: the task process's peak resident memory (0: nothing ran)
    worker_peak_rss: int = 0  # bytes: its largest record worker's


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
    """Run the file through every stage not committed yet, a slice of records at a time: each
    slice goes through all those stages before the next is read, so the task holds one slice
    (`read.SLICE_ROWS` records or `read.SLICE_BYTES` of HTML), whatever the file's size. Every
    stage's output is committed once the file is through."""
    keys = stage_keys(task.config, task.file_hash)
    dirs = [output_dir(task.cache, stage, key) for stage, key in keys]
    done = -1  # the stages committed in a row, each final for this run
    while done + 1 < len(dirs) and _final(dirs[done + 1], task.run):
        done += 1
    if done == len(dirs) - 1:
        return TaskResult(task.path, str(dirs[-1]), ())
    source = Path(task.path).name
    guard = RecordGuard(guard_dir(task.cache), keys[-1][1])
    todo = list(range(done + 1, len(keys)))
    outputs = {index: _Output(dirs[index], source) for index in todo}
    journals = {
        index: Journal(guard_dir(task.cache) / f"{key}.{name}.journal", task.run)
        for index, (name, key) in enumerate(keys)
        if index in outputs and index > 0  # reading decides nothing a retry could reuse
    }
    status = _Status(guard_dir(task.cache) / f"{keys[-1][1]}.status", source)
    try:
        slices: SliceReader | _ParquetSlices
        if done < 0:
            slices = SliceReader(
                Path(task.path), task.config.read, outputs[0].quarantine, SLICE_ROWS, SLICE_BYTES
            )
        else:
            slices = _ParquetSlices(dirs[done] / "data.parquet")
        stages = {index: get_stage(keys[index][0])(task.config) for index in journals}
        for index, stage_journal in journals.items():
            outputs[index].quarantine = Quarantine(source, guard=guard, journal=stage_journal)
        for batch in slices:
            if done < 0:
                outputs[0].write(batch, num_rows(batch))
            for index, stage in stages.items():
                rows_in = num_rows(batch)
                batch = stage.process(batch, outputs[index].quarantine)
                outputs[index].write(batch, rows_in)
            status.update(slices.at, slices.total, slices.unit, outputs[todo[-1]].rows_out)
        for index in todo:
            journal = journals.get(index)
            stats = {"timeouts": journal.timeouts, "run": task.run} if journal else {}
            outputs[index].commit(stats, read=index == 0)
            if journal:
                # a later run tries the timed-out records again, the others it takes from here
                journal.close(keep=journal.timeouts > 0)
            guard.advance()
    except BaseException:
        for output in outputs.values():
            output.abandon()
        guard.close(task_done=False)
        raise
    finally:
        status.clear()
    guard.close(task_done=True)
    computed = tuple(keys[index][0] for index in todo)
    return TaskResult(task.path, str(dirs[-1]), computed, *_peak_rss())


class _ParquetSlices:
    """A committed output, a slice at a time (a task resuming after its committed stages)."""

    unit = "rows"

    def __init__(self, path: Path) -> None:
        self.file = pq.ParquetFile(path)
        self.total = self.file.metadata.num_rows
        self.at = 0

    def __iter__(self) -> Iterator[Batch]:
        for record_batch in self.file.iter_batches(batch_size=SLICE_ROWS):
            self.at += record_batch.num_rows
            yield from_table(pa.Table.from_batches([record_batch]))


class _Status:
    """Where a running task is in its file, for progress lines: a small JSON file beside the
    guard's, replaced after every slice and removed when the task ends."""

    def __init__(self, path: Path, source: str) -> None:
        self.path = path
        self.fields = {"file": source, "started": time.time()}

    def update(self, at: int, total: int, unit: str, records: int) -> None:
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        fields = {**self.fields, "at": at, "total": total, "unit": unit, "records": records}
        tmp.write_text(json.dumps(fields))
        os.replace(tmp, self.path)

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)


def _peak_rss() -> tuple[int, int]:
    """(this task's peak resident memory, its largest record worker's), in bytes."""
    peak = 0
    with open("/proc/self/status") as fh:  # VmHWM: since this process was forked
        for line in fh:
            if line.startswith("VmHWM:"):
                peak = int(line.split()[1]) * 1024
    return peak, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024


class _Output:
    """One stage's output for a file, written a slice at a time into a temporary folder and
    renamed into place whole (`commit`)."""

    def __init__(self, final: Path, source: str) -> None:
        self.final = final
        self.tmp = final.parent / f".tmp-{final.name}-{uuid.uuid4().hex[:8]}"
        self.quarantine = Quarantine(source)
        self._writer: pq.ParquetWriter | None = None
        self._empty: Batch = {}
        self.rows_in = 0
        self.rows_out = 0

    def write(self, batch: Batch, rows_in: int) -> None:
        self.rows_in += rows_in
        if num_rows(batch) == 0:
            self._empty = self._empty or batch  # its column names, for a file with no rows
            return
        table = to_table(batch)
        if self._writer is None:
            self.tmp.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(
                self.tmp / "data.parquet", table.schema, compression="zstd"
            )
        self._writer.write_table(table.cast(self._writer.schema))
        self.rows_out += table.num_rows

    def commit(self, stats: dict[str, Any], read: bool) -> None:
        self.tmp.mkdir(parents=True, exist_ok=True)
        if self._writer is None:
            pq.write_table(to_table(self._empty), self.tmp / "data.parquet", compression="zstd")
        else:
            self._writer.close()
        pq.write_table(self.quarantine.table(), self.tmp / "quarantine.parquet")
        quarantine = self.quarantine
        stats = {**stats, "rows_out": self.rows_out, "policy": dict(quarantine.policy)}
        if not read:
            stats["rows_in"] = self.rows_in
        if quarantine.seen:
            stats["records_seen"] = quarantine.seen
        (self.tmp / "stats.json").write_text(json.dumps(stats, sort_keys=True))
        if self.final.is_dir():  # an output this run replaces: one with an earlier run's timeouts
            old = self.final.parent / f".tmp-old-{self.final.name}-{uuid.uuid4().hex[:8]}"
            with contextlib.suppress(OSError):
                os.rename(self.final, old)
            shutil.rmtree(old, ignore_errors=True)
        try:
            os.rename(self.tmp, self.final)
        except OSError:  # another attempt committed the same output first: theirs is identical
            shutil.rmtree(self.tmp, ignore_errors=True)

    def abandon(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def guard_dir(cache: str) -> Path:
    return Path(cache) / ".guard"


def task_key(task: FileTask) -> str:
    """The key a task's guard files are named by: its last stage's."""
    return stage_keys(task.config, task.file_hash)[-1][1]


def _final(folder: Path, run: str) -> bool:
    """A committed output this run can take as it is: one without timeouts, or made by this
    run (its timeouts hold until the run ends)."""
    if not folder.is_dir():
        return False
    stats = json.loads((folder / "stats.json").read_text())
    return not stats.get("timeouts") or stats.get("run") == run


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
