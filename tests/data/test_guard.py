"""A record that kills its worker (a crash, or a hang no alarm reaches) costs that record only."""

import ctypes
import os
import signal
import time
from pathlib import Path

import pyarrow.parquet as pq

from shipyard.data.config import ExtractConfig, PipelineConfig
from shipyard.data.executors.local import LocalExecutor
from shipyard.data.guard import POISON_REASON
from shipyard.data.stages.extract import register_extractor
from shipyard.data.tasks import FileTask, file_sha256, output_dir, run_task, stage_keys
from shipyard.data.warcpack import Page

from .conftest import MakeWarc, english_text, html_page


def native_trouble(html: str, main: bool) -> str:
    if "CRASH-ME" in html:
        ctypes.string_at(0)  # a real segmentation fault of the extract worker
    if "HANG-ME" in html:
        # Native code never returns to the interpreter, so no signal handler runs: block the
        # alarm signal to behave the same way. Only killing the worker ends this.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(600)
    if "KILL-TASK" in html:
        os.kill(os.getppid(), signal.SIGKILL)  # the task process itself dies mid-record
        time.sleep(600)
    return html


def trouble_task(make_warc: MakeWarc, tmp_path: Path, marks: dict[int, str]) -> FileTask:
    register_extractor("native-trouble", native_trouble)
    texts = [english_text(seed) for seed in range(5)]
    for index, mark in marks.items():
        texts[index] += f" {mark}"
    pages = [Page(f"https://example.org/{i}", html_page(t)) for i, t in enumerate(texts)]
    warc = make_warc("trouble.warc.gz", pages)
    config = PipelineConfig(
        "guard", (str(warc),), extract=ExtractConfig(engine="native-trouble", timeout_s=0.5)
    )
    return FileTask(str(warc), file_sha256(warc), config, str(tmp_path / "cache"))


def extract_output(task: FileTask) -> tuple[list[dict[str, str]], list[str]]:
    extract_key = dict(stage_keys(task.config, task.file_hash))["extract"]
    folder = output_dir(task.cache, "extract", extract_key)
    quarantined = pq.read_table(folder / "quarantine.parquet").to_pylist()
    return quarantined, pq.read_table(folder / "data.parquet").column("text").to_pylist()


def test_native_hangs_and_crashes_cost_their_record_within_the_attempt(
    make_warc: MakeWarc, tmp_path: Path
) -> None:
    task = trouble_task(make_warc, tmp_path, {0: "HANG-ME", 1: "CRASH-ME", 3: "HANG-ME"})
    [outcome] = LocalExecutor(workers=1, task_timeout_s=120, max_retries=0).map(run_task, [task])
    assert outcome.ok, outcome.error
    assert outcome.attempts == 1  # the extract worker was killed and replaced, not the task
    quarantined, kept = extract_output(task)
    assert [(r["doc_id"], r["reason"]) for r in quarantined] == [
        ("trouble.warc.gz:1", "timeout after 0.5s in extract"),
        ("trouble.warc.gz:2", "extract worker died (signal SIGSEGV)"),
        ("trouble.warc.gz:4", "timeout after 0.5s in extract"),
    ]
    assert len(kept) == 2 and not any("-ME" in t for t in kept)


def test_a_record_that_kills_its_task_is_quarantined_on_retry(
    make_warc: MakeWarc, tmp_path: Path
) -> None:
    task = trouble_task(make_warc, tmp_path, {2: "KILL-TASK"})
    [outcome] = LocalExecutor(workers=1, task_timeout_s=120, max_retries=2).map(run_task, [task])
    assert outcome.ok, outcome.error
    assert outcome.attempts == 2
    quarantined, kept = extract_output(task)
    assert [(r["doc_id"], r["reason"]) for r in quarantined] == [
        ("trouble.warc.gz:3", POISON_REASON)
    ]
    assert len(kept) == 4
    assert list((tmp_path / "cache" / ".guard").iterdir()) == []  # finished: nothing to remember


def test_a_healthy_rerun_poisons_nothing(make_warc: MakeWarc, tmp_path: Path) -> None:
    warc = make_warc("fine.warc.gz", [Page("https://example.org/a", html_page(english_text(9)))])
    config = PipelineConfig("guard", (str(warc),))
    task = FileTask(str(warc), file_sha256(warc), config, str(tmp_path / "cache"))
    result = run_task(task)
    assert pq.read_table(Path(result.output) / "quarantine.parquet").num_rows == 0
