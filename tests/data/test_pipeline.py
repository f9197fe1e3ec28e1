import dataclasses
import gzip
import json
import os
import random
import signal
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from shipyard.data import PipelineConfig, run_pipeline
from shipyard.data.config import (
    DecontamConfig,
    DedupConfig,
    ExecutorConfig,
    ExtractConfig,
    FilterConfig,
    TokenizeConfig,
)
from shipyard.data.pipeline import progress_line
from shipyard.data.stages.extract import register_extractor
from shipyard.data.tasks import FileTask, file_sha256, run_task
from shipyard.data.warcpack import Page, record_bytes
from shipyard.loader import TokenDataset
from shipyard.workspace import Workspace

from .conftest import MakeWarc, english_text, html_page

ALL_STAGES = {"read", "extract", "langid", "filters", "minhash", "pii", "decontam", "tokenize"}


def corpus(make_warc: MakeWarc) -> Path:
    pages_a = [Page(f"https://a.org/{i}", html_page(english_text(i), f"A{i}")) for i in range(6)]
    near = english_text(2).replace("ship", "boat", 1)
    pages_b = [
        Page("https://b.org/copy", html_page(english_text(1), "A1")),  # exact duplicate
        Page("https://b.org/near", html_page(near, "A2")),  # near duplicate
        Page("https://b.org/mail", html_page(english_text(40) + " Mail me at x.y@z.org now.")),
        Page("https://b.org/junk", bytes(range(256)) * 30),  # undecodable
        Page("https://fr.org/1", html_page("Le navire est arrivé au port ce matin. " * 12)),
    ]
    make_warc("a.warc.gz", pages_a)
    return make_warc("b.warc", pages_b, compression="none").parent


def config_for(folder: Path, **changes: object) -> PipelineConfig:
    base = PipelineConfig(
        "t",
        (str(folder),),
        tokenize=TokenizeConfig(vocab_size=400, shard_tokens=2048),
        executor=ExecutorConfig(workers=2, task_timeout_s=120, max_retries=1),
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_end_to_end_artifacts_lineage_and_tokens(
    make_warc: MakeWarc, workspace: Workspace, shipyard_home: Path, tmp_path: Path
) -> None:
    config = config_for(corpus(make_warc))
    lines: list[str] = []
    result = run_pipeline(config, workspace, shipyard_home, lines.append)
    assert set(result.computed) == ALL_STAGES and not result.failed_tasks
    assert any(line.startswith("documents 2/2 files") for line in lines)

    table = workspace.get(result.table_id, tmp_path / "table")
    assert table.kind == "dataset" and table.metadata["crawl"] == result.crawl_id
    rows = pq.read_table(sorted((tmp_path / "table").glob("part-*.parquet"))).to_pylist()
    by_url = {r["url"]: r for r in rows}
    assert len(rows) == 10 and "https://b.org/junk" not in by_url
    assert not by_url["https://b.org/copy"]["keep_exact"]
    assert not by_url["https://b.org/near"]["keep_minhash"]
    assert by_url["https://b.org/near"]["dup_cluster"] == by_url["https://a.org/2"]["doc_number"]
    assert "<EMAIL>" in by_url["https://b.org/mail"]["text"]
    assert by_url["https://fr.org/1"]["language"] == "fr"
    quarantine = pq.read_table(tmp_path / "table" / "quarantine.parquet").to_pylist()
    assert [(q["doc_id"], q["stage"]) for q in quarantine] == [("b.warc:4", "extract")]

    up = {edge.parent for edge in workspace.catalog.lineage(result.tokens_id or "", "up")}
    assert {result.table_id, result.tokenizer_id, result.crawl_id} <= up
    run = workspace.catalog.get_run(result.run_id)
    assert run is not None and run.inputs == (result.crawl_id,)
    assert run.config["config_hash"] == config.config_hash()

    workspace.get(result.tokens_id or "", tmp_path / "tokens")
    dataset = TokenDataset(tmp_path / "tokens")
    manifest = json.loads((tmp_path / "tokens" / "manifest.json").read_text())
    rules = ("gopher_repetition_ok", "gopher_quality_ok", "c4_ok", "fineweb_ok")
    selected = [
        r
        for r in rows
        if r["keep_exact"]
        and r["keep_minhash"]
        and not r["contaminated"]
        and all(r[k] for k in rules)
    ]
    assert dataset.num_docs == manifest["num_docs"] == len(selected) >= 5
    assert dataset.num_tokens == sum(s["num_tokens"] for s in manifest["shards"])
    assert len(manifest["shards"]) > 1  # small shard_tokens forces rolling
    assert sum(v for s in manifest["shards"] for v in s["tokens_by_language"].values()) == (
        dataset.num_tokens
    )
    assert manifest["shards"][0]["sources"]["a.warc.gz"][0] == 1
    assert (shipyard_home / "data" / "runs" / f"{result.run_id}.json").is_file()


def test_rerun_is_cached_and_a_changed_stage_recomputes_only_its_descendants(
    make_warc: MakeWarc, workspace: Workspace, shipyard_home: Path
) -> None:
    config = config_for(corpus(make_warc))
    first = run_pipeline(config, workspace, shipyard_home)
    again = run_pipeline(config, workspace, shipyard_home)
    assert not again.computed
    assert (again.table_id, again.tokens_id) == (first.table_id, first.tokens_id)
    # statistics come from the final table, not summed per attempt: a relaunch cannot skew them
    assert again.report["survival"] == first.report["survival"]
    assert again.report["quarantine"] == first.report["quarantine"] == {"extract": 1}

    changed = config_for(Path(config.inputs[0]), filters=FilterConfig(c4=False))
    third = run_pipeline(changed, workspace, shipyard_home)
    assert set(third.computed) == {"filters", "minhash", "pii", "decontam", "tokenize"}
    assert third.computed["filters"] == 2
    assert third.table_id != first.table_id

    # MinHash comes last: a [dedup] change reruns it alone, not PII or decontamination
    reseeded = dataclasses.replace(changed, dedup=DedupConfig(seed=7))
    fourth = run_pipeline(reseeded, workspace, shipyard_home)
    assert set(fourth.computed) == {"minhash", "tokenize"}
    assert fourth.computed["minhash"] == 2

    # clustering-only settings do not change a signature: no file's keys are recomputed
    clustered = dataclasses.replace(
        reseeded, dedup=DedupConfig(seed=7, threshold=0.9, bucket_cap=9)
    )
    fifth = run_pipeline(clustered, workspace, shipyard_home)
    assert "minhash" not in fifth.computed and "read" not in fifth.computed


def test_changed_benchmark_file_recomputes_decontamination(
    make_warc: MakeWarc, workspace: Workspace, shipyard_home: Path, tmp_path: Path
) -> None:
    bench = tmp_path / "bench.txt"
    bench.write_text("nothing from the corpus is in this benchmark line at all today\n")
    config = config_for(
        corpus(make_warc),
        decontam=DecontamConfig(benchmarks=(str(bench),)),
        tokenize=TokenizeConfig(enabled=False),
    )
    first = run_pipeline(config, workspace, shipyard_home)
    leaked = " ".join(english_text(3).split()[:20])
    bench.write_text(leaked + "\n")
    second = run_pipeline(config, workspace, shipyard_home)
    assert set(second.computed) == {"decontam", "minhash"}  # minhash is keyed after decontam
    funnel = {row["stage"]: row for row in second.report["survival"]["stages"]}
    before = {row["stage"]: row for row in first.report["survival"]["stages"]}
    assert funnel["decontam"]["out"] == before["decontam"]["out"] - 1


def test_killed_run_resumes_from_committed_tasks(
    make_warc: MakeWarc, workspace: Workspace, shipyard_home: Path
) -> None:
    folder = corpus(make_warc)
    config = config_for(folder)
    cache = shipyard_home / "data" / "cache"
    a = folder / "a.warc.gz"
    # what a killed run leaves behind: one file's stages committed, a half-written output
    run_task(FileTask(str(a), file_sha256(a), config, str(cache)))
    stale = cache / "extract" / ".tmp-deadbeef-0000"
    stale.mkdir(parents=True)
    (stale / "data.parquet").write_bytes(b"half")
    result = run_pipeline(config, workspace, shipyard_home)
    assert result.computed["read"] == 1 and result.computed["decontam"] == 1
    fresh = run_pipeline(config_for(folder), workspace, shipyard_home)
    assert fresh.table_id == result.table_id


def _crash_on_poison(html: str, main: bool) -> str:
    if "POISON" in html:
        # the task process itself dies (as under the out-of-memory killer), not just the
        # extract worker: the task fails, not the run
        os.kill(os.getppid(), signal.SIGKILL)
        time.sleep(60)
    return html


def _hang_on_mark(html: str, main: bool) -> str:
    if "HANG" in html:
        time.sleep(600)
    return html


def test_one_bad_task_never_fails_the_run(
    make_warc: MakeWarc, workspace: Workspace, shipyard_home: Path
) -> None:
    register_extractor("hang-on-mark", _hang_on_mark)
    make_warc("good.warc.gz", [Page("https://g.org/1", html_page(english_text(1)))])
    folder = make_warc("bad.warc.gz", [Page("https://p.org/1", b"<p>HANG</p>")]).parent
    # every attempt at the bad file is stopped at its deadline inside its only record: it
    # decides nothing, so each attempt is charged, and the file fails after its one retry
    config = config_for(
        folder,
        extract=ExtractConfig(engine="hang-on-mark", timeout_s=600),
        tokenize=TokenizeConfig(enabled=False),
        executor=ExecutorConfig(workers=2, task_timeout_s=20, max_retries=1),
    )
    result = run_pipeline(config, workspace, shipyard_home)
    assert result.failed_tasks == ["bad.warc.gz"]
    assert result.report["quarantine"] == {"task": 1}
    assert result.report["survival"]["documents"] == 1


def test_a_file_finishes_whatever_the_number_of_records_that_kill_its_task(
    make_warc: MakeWarc, workspace: Workspace, shipyard_home: Path, tmp_path: Path
) -> None:
    register_extractor("crashy", _crash_on_poison)
    pages = [
        Page(f"https://p.org/{i}", b"<p>POISON</p>" if i % 2 else html_page(english_text(i)))
        for i in range(8)
    ]
    folder = make_warc("bad.warc.gz", pages).parent
    # no retries: yet every attempt that dies on a new record moved the file forward
    config = config_for(
        folder,
        extract=ExtractConfig(engine="crashy"),
        tokenize=TokenizeConfig(enabled=False),
        executor=ExecutorConfig(workers=1, max_retries=0),
    )
    result = run_pipeline(config, workspace, shipyard_home)
    assert result.failed_tasks == []
    assert result.report["files"]["bad.warc.gz"]["kept"] == 4
    workspace.get(result.table_id, tmp_path / "table")
    quarantine = pq.read_table(tmp_path / "table" / "quarantine.parquet").to_pylist()
    assert sorted(q["doc_id"] for q in quarantine) == [f"bad.warc.gz:{i + 1}" for i in (1, 3, 5, 7)]


def test_real_crawl_excerpt(crawl_dir: Path, workspace: Workspace, shipyard_home: Path) -> None:
    config = dataclasses.replace(config_for(crawl_dir), tokenize=TokenizeConfig(enabled=False))
    result = run_pipeline(config, workspace, shipyard_home)
    assert result.report["survival"]["documents"] == 45
    assert result.report["quarantine"] == {"read": 1}  # clipped.warc.gz's cut record
    crawls = set(result.report["survival"]["by"]["crawl"])
    assert "CC-MAIN-2020-34" in crawls
    assert result.tokens_id is None


@pytest.mark.slow
def test_ray_executor_produces_the_same_table(
    make_warc: MakeWarc, workspace: Workspace, shipyard_home: Path
) -> None:
    pytest.importorskip("ray")
    folder = corpus(make_warc)
    local = run_pipeline(config_for(folder), workspace, shipyard_home)
    ray_config = config_for(folder, executor=ExecutorConfig(kind="ray", workers=2))
    # a fresh cache, so Ray really computes every stage
    other_home = shipyard_home.parent / "ray-home"
    ray_ws = Workspace.open(other_home)
    try:
        result = run_pipeline(ray_config, ray_ws, other_home)
    finally:
        ray_ws.close()
    assert result.computed["read"] == 2
    assert result.table_id == local.table_id


def test_report_counts_add_up_per_file_with_damage(
    make_warc: MakeWarc, workspace: Workspace, shipyard_home: Path
) -> None:
    folder = corpus(make_warc)
    damaged = folder / "c.warc.gz"
    chunks = [
        gzip.compress(record_bytes(Page(f"https://c.org/{i}", html_page(english_text(50 + i)))))
        for i in range(4)
    ]
    chunks.insert(2, b"\x1f\x8b\x08 not a gzip member at all")
    damaged.write_bytes(b"".join(chunks))
    tokenize = TokenizeConfig(enabled=False)
    result = run_pipeline(config_for(folder, tokenize=tokenize), workspace, shipyard_home)
    files = result.report["files"]
    assert files["c.warc.gz"] == {
        "seen": 5,
        "kept": 4,
        "filtered": 0,
        "quarantined": 0,
        "unreadable": 1,
    }
    assert files["b.warc"]["quarantined"] == 1  # the undecodable page
    # the report names each unreadable stretch by file and byte offset
    offset = sum(map(len, chunks[:2]))
    assert any(
        q["doc_id"] == f"c.warc.gz@{offset}" and q["stage"] == "read"
        for q in result.report["quarantined"]
    )
    progress = shipyard_home / "status.json"
    status = {"file": "c.warc.gz", "at": 250_000_000, "total": 1_000_000_000, "unit": "bytes"}
    progress.write_text(json.dumps({**status, "records": 412, "started": time.time() - 100}))
    line = progress_line(progress) or ""
    assert line.startswith(
        "reading   c.warc.gz: 25% (250 of 1,000 MB), 412 records, 2.5 MB/s, about 5m0"
    )
    for counts in files.values():
        parts = counts["kept"] + counts["filtered"] + counts["quarantined"] + counts["unreadable"]
        assert counts["seen"] == parts


def _sleep_forever(html: str, main: bool) -> str:
    time.sleep(600)
    return html


def test_a_run_whose_every_task_fails_saves_its_report(
    make_warc: MakeWarc, workspace: Workspace, shipyard_home: Path, tmp_path: Path
) -> None:
    register_extractor("sleep-forever", _sleep_forever)
    folder = make_warc("only.warc.gz", [Page("https://o.org/1", html_page(english_text(1)))])
    first = run_pipeline(
        config_for(folder.parent, tokenize=TokenizeConfig(enabled=False)), workspace, shipyard_home
    )
    # every attempt is stopped at its deadline in the middle of its only record
    config = config_for(
        folder.parent,
        extract=ExtractConfig(engine="sleep-forever", timeout_s=600),
        tokenize=TokenizeConfig(enabled=False),
        executor=ExecutorConfig(workers=1, task_timeout_s=2, max_retries=0),
    )
    result = run_pipeline(config, workspace, shipyard_home)
    assert result.failed_tasks == ["only.warc.gz"]
    assert result.report["survival"]["documents"] == 0
    assert result.report["quarantine"] == {"task": 1}
    from shipyard.data import stats

    latest = stats.load(shipyard_home, "latest")
    assert latest["run"] == result.run_id != first.run_id
    assert latest["failed_tasks"] == ["only.warc.gz"]
    # with tokenizing on, a run with no documents still ends with its report, and no tokens
    other = make_warc("two.warc.gz", [Page("https://o.org/2", html_page(english_text(2)))])
    config = dataclasses.replace(
        config, inputs=(str(other),), tokenize=TokenizeConfig(vocab_size=400)
    )
    again = run_pipeline(config, workspace, shipyard_home)
    assert again.failed_tasks == ["two.warc.gz"] and again.tokens_id is None
    assert stats.load(shipyard_home, "latest")["run"] == again.run_id


def test_a_file_read_in_slices_gives_the_same_table(
    make_warc: MakeWarc,
    workspace: Workspace,
    shipyard_home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    folder = corpus(make_warc)
    config = config_for(folder, tokenize=TokenizeConfig(enabled=False))
    whole = run_pipeline(config, workspace, shipyard_home)
    assert set(whole.report["memory"]) == {"a.warc.gz", "b.warc"}
    assert all(m["task"] > 0 and m["record_worker"] > 0 for m in whole.report["memory"].values())
    monkeypatch.setattr("shipyard.data.tasks.SLICE_ROWS", 2)  # forked tasks inherit it
    other_home = shipyard_home.parent / "sliced-home"
    other = Workspace.open(other_home)
    try:
        sliced = run_pipeline(config, other, other_home)
    finally:
        other.close()
    assert sliced.computed["read"] == 2
    assert sliced.table_id == whole.table_id
    assert sliced.report["files"] == whole.report["files"]


def _bulky_pages(prefix: str, count: int) -> list[Page]:
    """Pages of about 200 kB of markup around a short text: reading and extraction see the
    bytes, the filters see little of them."""
    pages = []
    for i in range(count):
        filler = random.Random(i).randbytes(100_000).hex()
        html = html_page(english_text(i)).replace(
            b"</body>", f"<script>{filler}</script></body>".encode()
        )
        pages.append(Page(f"https://{prefix}.org/{i}", html))
    return pages


@pytest.mark.slow
def test_a_tasks_memory_does_not_grow_with_its_file(
    make_warc: MakeWarc, workspace: Workspace, shipyard_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("shipyard.data.tasks.SLICE_BYTES", 2 << 20)  # both files span slices
    make_warc("small.warc", _bulky_pages("s", 50), compression="none")  # 10 MB
    folder = make_warc("large.warc", _bulky_pages("l", 300), compression="none").parent  # 60 MB
    config = config_for(
        folder,
        tokenize=TokenizeConfig(enabled=False),
        executor=ExecutorConfig(workers=1, task_timeout_s=3600),
    )
    result = run_pipeline(config, workspace, shipyard_home)
    assert result.report["files"]["large.warc"]["kept"] == 300
    memory = result.report["memory"]
    grown = memory["large.warc"]["task"] - memory["small.warc"]["task"]
    # the whole-file reader held the file several times over (mapped, copied, as a batch)
    assert grown < 16 << 20, memory


def test_the_report_prints_hostile_names_as_text(
    make_warc: MakeWarc,
    workspace: Workspace,
    shipyard_home: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from shipyard.cli.data import _report

    name = "odd[bold]x.warc"  # rich markup: must print as written, not be eaten
    folder = make_warc(name, [Page("https://o.org/junk", bytes(range(256)) * 30)]).parent
    config = config_for(folder, tokenize=TokenizeConfig(enabled=False))
    result = run_pipeline(config, workspace, shipyard_home)

    class Args:
        run, json, by, threshold = result.run_id, False, None, 0.05

    capsys.readouterr()
    _report(Args())  # type: ignore[arg-type]
    printed = capsys.readouterr().out
    assert f"{name}" in printed and "undecodable" in printed
