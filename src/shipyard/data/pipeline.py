"""`run_pipeline`: crawl → annotated table → tokenizer → token shards, each an artifact.

1. Per input file, one task runs read → extract → langid → filters → PII → decontam →
   minhash keys (see `tasks`), through the configured executor; cached stage outputs are reused.
2. Global dedup (URL, exact, MinHash-LSH clusters) over every file's keys.
3. The annotated table (one Parquet part per file, the quarantine, the statistics) is stored as a
   `dataset` artifact produced by a `data-annotate` run whose input is the crawl artifact.
4. Selection (SQL over the table), a BPE tokenizer (`tokenizer` artifact) and token shards
   (`dataset` artifact), produced by runs whose inputs are the table (and tokenizer).
"""

import json
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from shipyard.catalog import RunStatus
from shipyard.data import guard
from shipyard.data import stats as run_stats
from shipyard.data.batch import QUARANTINE_SCHEMA
from shipyard.data.config import PipelineConfig
from shipyard.data.dedup import dedup_files, stats_dict
from shipyard.data.executors import make_executor
from shipyard.data.executors.base import Outcome
from shipyard.data.inputs import put_crawl, resolve_inputs
from shipyard.data.isolate import TIMEOUT
from shipyard.data.stages.read import UNREADABLE
from shipyard.data.table import SCHEMA as TABLE_SCHEMA
from shipyard.data.table import write_part
from shipyard.data.tasks import (
    FileTask,
    TaskResult,
    file_sha256,
    guard_dir,
    read_chain,
    run_task,
    task_key,
)
from shipyard.data.tokenize import select, train_tokenizer, write_tokens
from shipyard.hashing import canonical_json, sha256_hex
from shipyard.provenance import code_version, current_user
from shipyard.store import put_tree
from shipyard.workspace import Workspace

Report = Callable[[str], None]


@dataclass
class PipelineResult:
    run_id: str
    crawl_id: str
    table_id: str
    tokenizer_id: str | None = None
    tokens_id: str | None = None
    computed: Counter[str] = field(default_factory=Counter)  # stage → files it was computed for
    failed_tasks: list[str] = field(default_factory=list)
    report: dict[str, Any] = field(default_factory=dict)


def run_pipeline(
    config: PipelineConfig, ws: Workspace, home: Path, report: Report | None = None
) -> PipelineResult:
    say = report or (lambda line: None)
    cache = home / "data" / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    files = resolve_inputs(ws, config.inputs, cache)
    crawl_id = put_crawl(ws, files, config.name)
    say(f"crawl     {crawl_id[:16]}  {len(files)} WARC files")
    run_id = ws.catalog.start_run(
        "data-annotate",
        {**config.to_dict(), "config_hash": config.config_hash()},
        code_version(),
        current_user(),
        [crawl_id],
    )
    status: RunStatus = "failed"
    try:
        result = _annotate(config, ws, home, cache, files, crawl_id, run_id, say)
        status = "succeeded"
    finally:
        ws.catalog.finish_run(run_id, status)
    if config.tokenize.enabled and result.report["survival"]["documents"] == 0:
        say("tokens    skipped: the table holds no documents")
    elif config.tokenize.enabled:
        _tokenize(config, ws, cache, result, say)
    return result


def _annotate(
    config: PipelineConfig,
    ws: Workspace,
    home: Path,
    cache: Path,
    files: list[Path],
    crawl_id: str,
    run_id: str,
    say: Report,
) -> PipelineResult:
    result = PipelineResult(run_id, crawl_id, "")
    tasks = [FileTask(str(f), file_sha256(f), config, str(cache), run_id) for f in files]
    done = 0

    def on_done(index: int, outcome: Outcome[TaskResult]) -> None:
        nonlocal done
        done += 1
        what = ",".join(outcome.value.computed) or "cached" if outcome.value else "FAILED"
        if outcome.value and outcome.value.peak_rss:
            what += f" (peak memory {_mib(outcome.value.peak_rss)} task, "
            what += f"{_mib(outcome.value.worker_peak_rss)} record worker)"
        say(f"documents {done}/{len(tasks)} files  {Path(tasks[index].path).name}: {what}")

    executor = make_executor(config.executor)
    try:
        outcomes = executor.map(run_task, tasks, on_done, TaskResume(say))
    finally:
        executor.close()
    task_quarantine = []
    good: list[tuple[FileTask, TaskResult]] = []
    for task, outcome in zip(tasks, outcomes, strict=True):
        if outcome.value is not None:
            good.append((task, outcome.value))
            result.computed.update(outcome.value.computed)
        else:
            name = Path(task.path).name
            result.failed_tasks.append(name)
            reason = f"task failed after {outcome.attempts} attempts: {outcome.error}"
            task_quarantine.append(
                {"doc_id": f"{name}:*", "source": name, "stage": "task", "reason": reason[:500]}
            )
    outputs = [Path(r.output) / "data.parquet" for _, r in good]
    # keyed by the stage outputs' keys, not their paths: the same inputs give the same table
    output_keys = [Path(r.output).name for _, r in good]
    dedup_key = sha256_hex(canonical_json([config.section_hash("dedup"), output_keys]))[:32]
    with tempfile.TemporaryDirectory(prefix="shipyard-table-", dir=cache) as tmp:
        table_dir = Path(tmp, "table")
        table_dir.mkdir()
        dedup_tables, dedup_stats = dedup_files(outputs, config.dedup, Path(tmp, "dedup"))
        say(
            f"dedup     {dedup_stats.documents} docs: {dedup_stats.url_duplicates} URL, "
            f"{dedup_stats.exact_duplicates} exact, {dedup_stats.near_duplicates} near duplicates"
        )
        for index, (output, dedup) in enumerate(zip(outputs, dedup_tables, strict=True)):
            write_part(output, dedup, table_dir / f"part-{index:05d}.parquet")
        quarantine, policy, files_seen = _quarantine(config, good, task_quarantine)
        pq.write_table(quarantine, table_dir / "quarantine.parquet")
        parts = sorted(table_dir.glob("part-*.parquet"))
        # no parts when every task failed: the report still says so, over an empty table
        table = pq.read_table(parts) if parts else TABLE_SCHEMA.empty_table()
        report = {
            "name": config.name,
            "config_hash": config.config_hash(),
            "crawl": crawl_id,
            "survival": run_stats.survival(table),
            "quarantine": dict(Counter(quarantine.column("stage").to_pylist())),
            "policy": dict(policy),
            "dedup": {**stats_dict(dedup_stats), "key": dedup_key},
            "failed_tasks": result.failed_tasks,
            "files": _file_counts(table, quarantine, files_seen),
            "timeouts": _timeouts(quarantine),
        }
        (table_dir / "stats.json").write_text(json.dumps(report, indent=1, sort_keys=True))
        manifest = put_tree(
            ws.pieces,
            table_dir,
            "dataset",
            metadata={
                "table": "annotated",
                "name": config.name,
                "config_hash": config.config_hash(),
                "crawl": crawl_id,
            },
        )
        record = ws.register(manifest, run_id)
        ws.move_alias(f"{config.name}-annotated", record.id)
    result.table_id = record.id
    # how this run went, not what it made: the run's report, not the table's stats.json
    result.report = {
        **report,
        "table": record.id,
        "memory": _memory(good),
        "quarantined": quarantine.to_pylist(),
    }
    run_stats.save(home, run_id, result.report)
    say(
        f"table     {record.id[:16]}  {table.num_rows} documents, {quarantine.num_rows} quarantined"
    )
    return result


class TaskResume:
    """What the executors need to know of a task's record-level progress (`guard`), and the
    progress lines of the files being read (from each task's status file)."""

    EVERY_S = 10.0  # between progress lines

    def __init__(self, say: Report) -> None:
        self.say = say
        self.last = time.monotonic()

    def watch(self, running: Sequence[FileTask]) -> None:
        if time.monotonic() - self.last < self.EVERY_S:
            return
        self.last = time.monotonic()
        for task in running:
            line = progress_line(guard_dir(task.cache) / f"{task_key(task)}.status")
            if line:
                self.say(line)

    def progress(self, task: FileTask) -> int:
        return guard.progress(guard_dir(task.cache), task_key(task))

    def interrupted(self, task: FileTask) -> None:
        guard.interrupted(guard_dir(task.cache), task_key(task))


def _quarantine(
    config: PipelineConfig, good: list[tuple[FileTask, TaskResult]], extra: list[dict[str, str]]
) -> tuple[pa.Table, Counter[str], dict[str, tuple[int, Counter[str]]]]:
    """Every file's quarantine rows and policy drops, and per file (records seen, policy drops)."""
    tables = [pa.Table.from_pylist(extra, schema=QUARANTINE_SCHEMA)]
    policy: Counter[str] = Counter()
    per_file: dict[str, tuple[int, Counter[str]]] = {}
    for task, _ in good:
        chain = read_chain(config, task.file_hash, task.cache)
        tables.append(chain.quarantine)
        policy.update(chain.policy)
        per_file[Path(task.path).name] = (chain.seen, chain.policy)
    return pa.concat_tables(tables), policy, per_file


def _file_counts(
    table: pa.Table, quarantine: pa.Table, files: dict[str, tuple[int, Counter[str]]]
) -> dict[str, dict[str, int]]:
    """Per input file: records seen = kept + filtered + quarantined + unreadable.

    `kept` are the file's rows in the annotated table, `filtered` its policy drops (blocklist,
    duplicate URL, status, content type), `unreadable` the stretches the reader could not read.
    """
    kept = Counter(table.column("source").to_pylist()) if table.num_rows else Counter()
    quarantined: Counter[str] = Counter()
    unreadable: Counter[str] = Counter()
    for source, reason in zip(
        quarantine.column("source").to_pylist(),
        quarantine.column("reason").to_pylist(),
        strict=True,
    ):
        (unreadable if reason.startswith(UNREADABLE) else quarantined)[source] += 1
    return {
        name: {
            "seen": seen,
            "kept": kept[name],
            "filtered": sum(policy.values()),
            "quarantined": quarantined[name],
            "unreadable": unreadable[name],
        }
        for name, (seen, policy) in sorted(files.items())
    }


def progress_line(status: Path) -> str | None:
    """`reading NAME: 41% (439 of 1074 MB), 412 records, 3.1 MB/s, about 3m10s left` for a
    running task's status file; None when there is none (not started, or done)."""
    try:
        fields = json.loads(status.read_text())
        at, total, unit = int(fields["at"]), int(fields["total"]), str(fields["unit"])
        elapsed = max(time.time() - float(fields["started"]), 1e-3)
        name, records = str(fields["file"]), int(fields["records"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    scale, label = (1e6, "MB") if unit == "bytes" else (1.0, "rows")
    rate = at / elapsed
    left = f"about {_duration((total - at) / rate)} left" if rate > 0 else "starting"
    share = at / total if total else 1.0
    return (
        f"reading   {name}: {share:.0%} ({at / scale:,.0f} of {total / scale:,.0f} {label}), "
        f"{records} records, {rate / scale:,.1f} {label}/s, {left}"
    )


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.0f} MiB"


def _memory(good: list[tuple[FileTask, TaskResult]]) -> dict[str, dict[str, int]]:
    """Per file this run computed: the peak resident memory of its task process and of its
    largest record worker, in bytes (a file taken whole from the cache is not listed)."""
    return {
        Path(task.path).name: {"task": r.peak_rss, "record_worker": r.worker_peak_rss}
        for task, r in good
        if r.peak_rss
    }


def _timeouts(quarantine: pa.Table) -> list[dict[str, str]]:
    """The records some stage gave up on past its per-record timeout, by stage and name."""
    return [
        {"stage": row["stage"], "doc_id": row["doc_id"], "source": row["source"]}
        for row in quarantine.to_pylist()
        if row["reason"].startswith(TIMEOUT)
    ]


def _tokenize(
    config: PipelineConfig, ws: Workspace, cache: Path, result: PipelineResult, say: Report
) -> None:
    sections = {"select": config.to_dict()["select"], "tokenize": config.to_dict()["tokenize"]}
    key = sha256_hex(canonical_json([result.table_id, sections]))[:32]
    folder = cache / "tokenize" / key
    if not folder.is_dir():
        _build_tokens(config, ws, folder, result.table_id)
        result.computed["tokenize"] += 1
    tokenizer_id = _register(
        ws, folder / "tokenizer", "tokenizer", [result.table_id], sections, config.name
    )
    tokens_id = _register(
        ws, folder / "tokens", "dataset", [result.table_id, tokenizer_id], sections, config.name
    )
    result.tokenizer_id, result.tokens_id = tokenizer_id, tokens_id
    manifest = json.loads((folder / "tokens" / "manifest.json").read_text())
    say(
        f"tokens    {tokens_id[:16]}  {manifest['num_docs']} docs, "
        f"{manifest['num_tokens']} tokens, {len(manifest['shards'])} shards "
        f"(tokenizer {tokenizer_id[:16]})"
    )


def _build_tokens(config: PipelineConfig, ws: Workspace, folder: Path, table_id: str) -> None:
    tmp = folder.parent / f".tmp-{folder.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    ws.get(table_id, tmp / "table")
    selected = select(tmp / "table", config.select.where)
    tokenizer = train_tokenizer(selected.text, config.tokenize, tmp / "tokenizer")
    write_tokens(selected, tokenizer, config.tokenize.shard_tokens, tmp / "tokens")
    shutil.rmtree(tmp / "table")
    os.rename(tmp, folder)


def _register(
    ws: Workspace, path: Path, kind: str, inputs: list[str], config: dict[str, Any], name: str
) -> str:
    run_id = ws.catalog.start_run(f"data-{kind}", config, code_version(), current_user(), inputs)
    status: RunStatus = "failed"
    try:
        manifest = put_tree(ws.pieces, path, kind, metadata={"name": name, **config})
        record = ws.register(manifest, run_id)
        ws.move_alias(f"{name}-{'tokenizer' if kind == 'tokenizer' else 'tokens'}", record.id)
        status = "succeeded"
    finally:
        ws.catalog.finish_run(run_id, status)
    return record.id
