"""Aliases move only by compare-and-swap and keep history; lineage walks both ways.

Every test here runs on SQLite and on a real PostgreSQL server (the `db_url` fixture).
"""

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from shipyard.catalog import ArtifactRecord, Catalog, open_catalog
from shipyard.errors import Conflict, InvalidInput, NotFound


def artifact(catalog: Catalog, char: str, kind: str = "model", run: str | None = None) -> str:
    artifact_id = char * 64
    catalog.add_artifact(ArtifactRecord(artifact_id, kind, 10, 1, time.time(), run))
    if run:
        catalog.add_run_output(run, artifact_id)
    return artifact_id


@pytest.fixture
def catalog(db_url: str) -> Iterator[Catalog]:
    opened = open_catalog(db_url)
    yield opened
    opened.close()


def test_alias_moves_by_compare_and_swap_and_keeps_history(catalog: Catalog) -> None:
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


def test_alias_to_unknown_artifact_or_with_bad_name_is_refused(catalog: Catalog) -> None:
    a = artifact(catalog, "a")
    with pytest.raises(NotFound):
        catalog.set_alias("prod", "f" * 64, expect=None, by="x")
    for bad in ["", "has space", "../x", "e" * 64]:
        with pytest.raises(InvalidInput):
            catalog.set_alias(bad, a, expect=None, by="x")
    assert catalog.list_aliases() == {}


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("a1ff", "reads as an artifact id prefix"),
        ("DEADbeef", "reads as an artifact id prefix"),
        ("0123456789", "reads as an artifact id prefix"),
        ("-rf", "would read as an option"),
        ("--expect", "would read as an option"),
        ("/etc", "would read as a path"),
    ],
)
def test_alias_names_that_read_as_something_else_are_refused(
    catalog: Catalog, name: str, why: str
) -> None:
    a = artifact(catalog, "a")
    with pytest.raises(InvalidInput, match=f"alias '{name}'.*{why}.*letters, digits|{why}: add"):
        catalog.set_alias(name, a, expect=None, by="x")
    assert catalog.list_aliases() == {}


@pytest.mark.parametrize("name", ["abc", "a1fz", "beefy", "prod-model", "team/model:v2", "x-"])
def test_alias_names_with_a_non_hex_character_or_under_four_digits_are_accepted(
    catalog: Catalog, name: str
) -> None:
    a = artifact(catalog, "a")
    catalog.set_alias(name, a, expect=None, by="x")
    assert catalog.get_alias(name) == a


def test_run_records_inputs_outputs_config_and_code(catalog: Catalog) -> None:
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


def test_lineage_up_and_down_across_generations(catalog: Catalog) -> None:
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


def test_prefix_lookup_returns_every_match(catalog: Catalog) -> None:
    catalog.add_artifact(ArtifactRecord("abcd" + "0" * 60, "model", 1, 1, 0.0, None))
    catalog.add_artifact(ArtifactRecord("abcd" + "1" * 60, "model", 1, 1, 0.0, None))
    assert len(catalog.find_by_prefix("abcd")) == 2
    assert catalog.find_by_prefix("abcd1") == ["abcd" + "1" * 60]
    assert catalog.find_by_prefix("xyz") == []


def test_racing_alias_moves_from_the_same_target_have_one_winner(db_url: str) -> None:
    """Eight connections move one alias from the same expected target at once: one wins, seven
    get `Conflict`, and the history holds exactly the one move."""
    setup = open_catalog(db_url)
    a = artifact(setup, "a")
    targets = [artifact(setup, f"{i:x}") for i in range(8)]
    setup.set_alias("prod", a, expect=None, by="setup")

    def move(target: str) -> bool:
        catalog = open_catalog(db_url)
        try:
            catalog.set_alias("prod", target, expect=a, by=target[:4])
            return True
        except Conflict:
            return False
        finally:
            catalog.close()

    with ThreadPoolExecutor(8) as pool:
        won = list(pool.map(move, targets))
    assert won.count(True) == 1
    winner = targets[won.index(True)]
    assert setup.get_alias("prod") == winner
    assert [(e.old_id, e.new_id) for e in setup.alias_history("prod")] == [(None, a), (a, winner)]
    setup.close()
