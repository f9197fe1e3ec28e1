"""A record that kills its worker (a crash, or a hang no alarm reaches) costs that record only."""

import ctypes
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
        ctypes.string_at(0)  # a real segmentation fault of the worker process
    if "HANG-ME" in html:
        # Native code never returns to the interpreter, so no signal handler runs: block the
        # per-record alarm to behave the same way.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(600)
    return html


def test_records_that_kill_the_worker_are_quarantined_on_retry(
    make_warc: MakeWarc, tmp_path: Path
) -> None:
    register_extractor("native-trouble", native_trouble)
    texts = [english_text(seed) for seed in range(5)]
    texts[1] += " CRASH-ME"
    texts[3] += " HANG-ME"
    pages = [Page(f"https://example.org/{i}", html_page(t)) for i, t in enumerate(texts)]
    warc = make_warc("trouble.warc.gz", pages)
    config = PipelineConfig(
        "guard", (str(warc),), extract=ExtractConfig(engine="native-trouble", timeout_s=0.5)
    )
    task = FileTask(str(warc), file_sha256(warc), config, str(tmp_path / "cache"))

    # Each death costs one attempt: the crash, then the hang (killed at the task timeout).
    [outcome] = LocalExecutor(workers=1, task_timeout_s=20, max_retries=2).map(run_task, [task])

    assert outcome.ok, outcome.error
    assert outcome.attempts == 3
    extract_key = dict(stage_keys(config, task.file_hash))["extract"]
    folder = output_dir(task.cache, "extract", extract_key)
    quarantined = pq.read_table(folder / "quarantine.parquet").to_pylist()
    assert sorted(r["reason"] for r in quarantined) == [POISON_REASON, POISON_REASON]
    kept = pq.read_table(folder / "data.parquet").column("text").to_pylist()
    assert len(kept) == 3
    assert not any("CRASH-ME" in t or "HANG-ME" in t for t in kept)
    assert list((tmp_path / "cache" / ".guard").iterdir()) == []  # finished: nothing to remember


def test_a_healthy_rerun_poisons_nothing(make_warc: MakeWarc, tmp_path: Path) -> None:
    warc = make_warc("fine.warc.gz", [Page("https://example.org/a", html_page(english_text(9)))])
    config = PipelineConfig("guard", (str(warc),))
    task = FileTask(str(warc), file_sha256(warc), config, str(tmp_path / "cache"))
    result = run_task(task)
    assert pq.read_table(Path(result.output) / "quarantine.parquet").num_rows == 0
