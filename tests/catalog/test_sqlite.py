"""Aliases move only by compare-and-swap and keep history; lineage walks both ways."""

import time
from pathlib import Path

import pytest

from shipyard.catalog import ArtifactRecord, SQLiteCatalog
from shipyard.errors import Conflict, InvalidInput, NotFound


def artifact(catalog: SQLiteCatalog, char: str, kind: str = "model", run: str | None = None) -> str:
    artifact_id = char * 64
    catalog.add_artifact(ArtifactRecord(artifact_id, kind, 10, 1, time.time(), run))
    if run:
        catalog.add_run_output(run, artifact_id)
    return artifact_id


@pytest.fixture
def catalog(tmp_path: Path) -> SQLiteCatalog:
    return SQLiteCatalog(tmp_path / "catalog.db")


def test_alias_moves_by_compare_and_swap_and_keeps_history(catalog: SQLiteCatalog) -> None:
    a, b, c = artifact(catalog, "a"), artifact(catalog, "b"), artifact(catalog, "c")
    catalog.set_alias("prod", a, expect=None, by="alice")
    catalog.set_alias("prod", b, expect=a, by="bob")
    with pytest.raises(Conflict, match=f"points at {b}"):
        catalog.set_alias("prod", c, expect=a, by="carol")
    with pytest.raises(Conflict):
        catalog.set_alias("prod", c, expect=None, by="carol")
    assert catalog.get_alias("prod") == b
    history = catalog.alias_history("prod")
    assert [(e.old_id, e.new_id, e.by) for e in history] == [(None, a, "alice"), (a, b, "bob")]


def test_alias_to_unknown_artifact_or_with_bad_name_is_refused(catalog: SQLiteCatalog) -> None:
    a = artifact(catalog, "a")
    with pytest.raises(NotFound):
        catalog.set_alias("prod", "f" * 64, expect=None, by="x")
    for bad in ["", "has space", "../x", "e" * 64]:
        with pytest.raises(InvalidInput):
            catalog.set_alias(bad, a, expect=None, by="x")
    assert catalog.list_aliases() == {}


def test_run_records_inputs_outputs_config_and_code(catalog: SQLiteCatalog) -> None:
    data = artifact(catalog, "d", "dataset")
    run = catalog.start_run("train", {"lr": 0.1}, "shipyard-0.1.0+gabc", "alice", [data])
    model = artifact(catalog, "m", run=run)
    catalog.finish_run(run, "succeeded")
    record = catalog.get_run(run)
    assert record is not None
    assert (record.inputs, record.outputs, record.status) == ((data,), (model,), "succeeded")
    assert record.config == {"lr": 0.1}
    assert len(record.config_hash) == 64
    with pytest.raises(NotFound):
        catalog.start_run("train", {}, "v", "alice", ["0" * 64])


def test_lineage_up_and_down_across_generations(catalog: SQLiteCatalog) -> None:
    """crawl → dataset → base model → {chat model, eval report}; a takedown of the crawl
    must reach every model downstream of it."""
    crawl = artifact(catalog, "1", "crawl")
    run1 = catalog.start_run("pipeline", {}, "v", "u", [crawl])
    dataset = artifact(catalog, "2", "dataset", run1)
    run2 = catalog.start_run("train", {}, "v", "u", [dataset])
    base = artifact(catalog, "3", "model", run2)
    run3 = catalog.start_run("finetune", {}, "v", "u", [base])
    chat = artifact(catalog, "4", "model", run3)
    run4 = catalog.start_run("eval", {}, "v", "u", [base])
    report = artifact(catalog, "5", "eval-report", run4)
    other = artifact(catalog, "6", "dataset")

    down = {e.child for e in catalog.lineage(crawl, "down")}
    assert {dataset, base, chat, report} <= down
    assert other not in down
    up = catalog.lineage(chat, "up")
    assert [e.parent for e in up if e.depth == 1] == [run3]
    assert {e.parent for e in up} == {run3, base, run2, dataset, run1, crawl}
    assert catalog.lineage(other, "up") == []


def test_prefix_lookup_returns_every_match(catalog: SQLiteCatalog) -> None:
    catalog.add_artifact(ArtifactRecord("abcd" + "0" * 60, "model", 1, 1, 0.0, None))
    catalog.add_artifact(ArtifactRecord("abcd" + "1" * 60, "model", 1, 1, 0.0, None))
    assert len(catalog.find_by_prefix("abcd")) == 2
    assert catalog.find_by_prefix("abcd1") == ["abcd" + "1" * 60]
    assert catalog.find_by_prefix("xyz") == []
