"""Filters, PII and decontamination give up on a record past their per-record timeout: the record
is quarantined by stage and name, the run goes on, and the report lists it as timed out."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from shipyard.cli.data import _report
from shipyard.data import PipelineConfig, run_pipeline
from shipyard.data.batch import Quarantine
from shipyard.data.config import (
    DecontamConfig,
    ExecutorConfig,
    ExtractConfig,
    FilterConfig,
    PiiConfig,
    TokenizeConfig,
    from_dict,
)
from shipyard.data.stages import get_stage
from shipyard.data.stages.extract import register_extractor
from shipyard.data.warcpack import Page
from shipyard.errors import InvalidInput
from shipyard.workspace import Workspace

from .conftest import MakeWarc, english_text, html_page

# spaCy's prefix rules strip one "(" at a time, rescanning the rest (quadratic, in spaCy too): a
# 20,000-long run keeps the filters' tokenizer busy for over a minute. The e-mail pattern
# backtracks over "a.a.a.…" (each "a" may start an address), about 15 s for 80,000 characters.
FILTER_TRAP = "(" * 20000 + "x"
PII_TRAP = "a." * 40000


def test_pathological_records_time_out_by_name_and_the_run_goes_on(
    make_warc: MakeWarc, workspace: Workspace, shipyard_home: Path, tmp_path: Path, capsys: object
) -> None:
    texts = [english_text(i) for i in range(4)]
    texts[1] += "\n\n" + FILTER_TRAP
    texts[2] += "\n\n" + PII_TRAP
    pages = [Page(f"https://trap.org/{i}", html_page(t, f"T{i}")) for i, t in enumerate(texts)]
    warc = make_warc("trap.warc.gz", pages)
    config = PipelineConfig(
        "traps",
        (str(warc),),
        filters=FilterConfig(timeout_s=2.0),
        pii=PiiConfig(timeout_s=2.0),
        tokenize=TokenizeConfig(enabled=False),
        executor=ExecutorConfig(workers=1, task_timeout_s=300, max_retries=0),
    )
    result = run_pipeline(config, workspace, shipyard_home)
    assert not result.failed_tasks

    assert result.report["timeouts"] == [
        {"stage": "filters", "doc_id": "trap.warc.gz:2", "source": "trap.warc.gz"},
        {"stage": "pii", "doc_id": "trap.warc.gz:3", "source": "trap.warc.gz"},
    ]
    table = tmp_path / "table"
    workspace.get(result.table_id, table)
    quarantine = pq.read_table(table / "quarantine.parquet").to_pylist()
    assert [(q["stage"], q["reason"]) for q in quarantine] == [
        ("filters", "timeout after 2s in filters"),
        ("pii", "timeout after 2s in pii"),
    ]
    rows = pq.read_table(sorted(table.glob("part-*.parquet"))).to_pylist()
    assert sorted(r["url"] for r in rows) == ["https://trap.org/0", "https://trap.org/3"]
    assert all(r["gopher_quality_ok"] and r["pii_count"] == 0 for r in rows)
    stats = json.loads((table / "stats.json").read_text())
    assert stats["files"]["trap.warc.gz"] == {
        "seen": 4,
        "kept": 2,
        "filtered": 0,
        "quarantined": 2,
        "unreadable": 0,
    }

    class Args:
        run, json, by, threshold = result.run_id, False, None, 0.05

    capsys.readouterr()  # type: ignore[attr-defined]
    _report(Args())  # type: ignore[arg-type]
    printed = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "timed out: 2" in printed
    assert "filters    trap.warc.gz:2" in printed and "pii        trap.warc.gz:3" in printed
    # every quarantined record, with its file and number, and each file's counts
    assert "quarantined: 2 (filters 1, pii 1)" in printed
    lines = printed.splitlines()
    assert any(
        line.split()[:3] == ["filters", "trap.warc.gz", "#2"] and "timeout after 2s" in line
        for line in lines
    )
    assert any(line.split()[:6] == ["trap.warc.gz", "4", "2", "0", "2", "0"] for line in lines)


def test_decontamination_times_out_per_record(tmp_path: Path) -> None:
    bench = tmp_path / "bench.txt"
    bench.write_text("what is the name of the captain who sailed the old ship across the river\n")
    config = PipelineConfig(
        "t", ("x",), decontam=DecontamConfig(benchmarks=(str(bench),), timeout_s=0.3)
    )
    # no pattern here backtracks: normalizing, splitting and hashing 20 MB take seconds
    texts = [english_text(4), english_text(5) * 16000, english_text(6)]
    quarantine = Quarantine("f")
    batch = {"doc_id": ["a", "huge", "b"], "text": texts}
    out = get_stage("decontam")(config).process(batch, quarantine)
    assert out["doc_id"] == ["a", "b"] and out["contaminated"] == [False, False]
    assert quarantine.rows == [
        {
            "doc_id": "huge",
            "source": "f",
            "stage": "decontam",
            "reason": "timeout after 0.3s in decontam",
        }
    ]


def test_filters_with_every_rule_off_do_not_split_words() -> None:
    off = FilterConfig(
        gopher_repetition=False, gopher_quality=False, c4=False, fineweb=False, timeout_s=0.5
    )
    config = PipelineConfig("t", ("x",), filters=off)
    quarantine = Quarantine("f")
    batch = {"doc_id": ["trap"], "text": [FILTER_TRAP]}  # minutes of word splitting
    out = get_stage("filters")(config).process(batch, quarantine)
    assert quarantine.rows == [] and out["doc_id"] == ["trap"]
    assert out["c4_ok"] == [True] and out["c4_reason"] == [""]


@pytest.mark.parametrize("section", ["filters", "pii", "decontam"])
def test_a_timeout_must_be_positive(section: str) -> None:
    with pytest.raises(InvalidInput, match=f"{section}.timeout_s must be positive"):
        from_dict(PipelineConfig, {"name": "t", "inputs": ["x"], section: {"timeout_s": 0}})


def _burn(html: str, main: bool) -> str:
    """A fixed amount of CPU work per page: what a healthy but large page costs."""
    rounds = int(html.split("BURN-")[1].split("<")[0])
    total = 0
    for i in range(rounds):
        total += i * i
    return f"burned {total % 7}"


# busy until its parent is gone, so it cannot outlive a killed test run
SPIN = "import os\nparent = os.getppid()\nwhile os.getppid() == parent: pass"


def test_load_does_not_turn_a_healthy_record_into_a_timeout() -> None:
    """Two dozen busy processes share the record's CPU: by the clock it takes some 25 times its
    own CPU time, which is all a record is charged; its budget is 8 times that."""
    register_extractor("burn", _burn)
    rounds = 1_000_000
    cpu = 0.0
    for _ in range(3):  # the slowest of three, on this machine as it is now
        started = time.thread_time()
        expected = _burn(f"BURN-{rounds}<", True)
        cpu = max(cpu, time.thread_time() - started)
    config = PipelineConfig("t", ("x",), extract=ExtractConfig(engine="burn", timeout_s=8 * cpu))
    batch = {"doc_id": ["a", "b"], "html": [f"<p>BURN-{rounds}</p>".encode()] * 2}
    cpu_set = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpu_set)})  # the load and the record on one CPU
    busy = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(24)]
    try:
        quarantine = Quarantine("f")
        out = get_stage("extract")(config).process(batch, quarantine)
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()
        os.sched_setaffinity(0, cpu_set)
    assert quarantine.rows == []
    assert out["text"] == [expected, expected]


def _slow_on_mark(html: str, main: bool) -> str:
    if "SLOW" in html or ("MAYBE" in html and os.environ.get("SHIPYARD_TEST_SLOW")):
        time.sleep(600)
    return html


def test_per_record_timeouts_past_the_task_deadline_still_finish_the_file(
    make_warc: MakeWarc, workspace: Workspace, shipyard_home: Path, tmp_path: Path
) -> None:
    """Five records of 1 s each in a task with a 4 s deadline and no retries: every attempt
    decides a few and the next resumes after them, so the file ends with its healthy records and
    each slow one quarantined once."""
    register_extractor("slow-on-mark", _slow_on_mark)
    slow = {1, 2, 4, 5, 6}
    pages = [
        Page(f"https://s.org/{i}", html_page("SLOW" if i in slow else english_text(i)))
        for i in range(8)
    ]
    warc = make_warc("slow.warc.gz", pages)
    config = PipelineConfig(
        "slow",
        (str(warc),),
        extract=ExtractConfig(engine="slow-on-mark", timeout_s=1.0),
        tokenize=TokenizeConfig(enabled=False),
        executor=ExecutorConfig(workers=1, task_timeout_s=4, max_retries=0),
    )
    result = run_pipeline(config, workspace, shipyard_home)
    assert result.failed_tasks == []
    workspace.get(result.table_id, tmp_path / "table")
    quarantine = pq.read_table(tmp_path / "table" / "quarantine.parquet").to_pylist()
    assert sorted(q["doc_id"] for q in quarantine) == [
        f"slow.warc.gz:{i + 1}" for i in sorted(slow)
    ]
    assert {q["reason"] for q in quarantine} == {"timeout after 1s in extract"}
    assert result.report["files"]["slow.warc.gz"]["kept"] == 3


def test_a_timeout_is_not_cached_as_the_records_verdict(
    make_warc: MakeWarc, workspace: Workspace, shipyard_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    register_extractor("slow-on-mark", _slow_on_mark)
    texts = [english_text(20), english_text(21) + " MAYBE", english_text(22)]
    warc = make_warc(
        "maybe.warc.gz", [Page(f"https://m.org/{i}", html_page(t)) for i, t in enumerate(texts)]
    )
    config = PipelineConfig(
        "maybe",
        (str(warc),),
        extract=ExtractConfig(engine="slow-on-mark", timeout_s=1.0),
        tokenize=TokenizeConfig(enabled=False),
        executor=ExecutorConfig(workers=1),
    )
    monkeypatch.setenv("SHIPYARD_TEST_SLOW", "1")  # a slow moment, not a bad page
    first = run_pipeline(config, workspace, shipyard_home)
    assert [t["doc_id"] for t in first.report["timeouts"]] == ["maybe.warc.gz:2"]
    monkeypatch.delenv("SHIPYARD_TEST_SLOW")
    second = run_pipeline(config, workspace, shipyard_home)
    assert second.report["timeouts"] == []
    assert second.report["files"]["maybe.warc.gz"]["kept"] == 3
    assert "read" not in second.computed  # only what followed the timeout was redone
    third = run_pipeline(config, workspace, shipyard_home)
    assert not third.computed and third.table_id == second.table_id
