"""The workspace resolves references and records lineage for every put."""

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from shipyard.catalog import ArtifactRecord
from shipyard.errors import InvalidInput, NotFound
from shipyard.workspace import Workspace


def make_tree(root: Path, text: str) -> Path:
    root.mkdir(parents=True)
    (root / "f.txt").write_text(text)
    return root


def test_put_records_a_run_and_lineage(workspace: Workspace, tmp_path: Path) -> None:
    data = workspace.put(make_tree(tmp_path / "d", "data"), "dataset", name="ds")
    model = workspace.put(make_tree(tmp_path / "m", "model"), "model", inputs=["ds"])
    assert model.run_id is not None
    run = workspace.catalog.get_run(model.run_id)
    assert run is not None
    assert run.inputs == (data.id,)
    assert run.status == "succeeded"
    assert run.code_version.startswith("shipyard-")
    assert data.id in {e.parent for e in workspace.catalog.lineage(model.id, "up")}


def test_resolve_alias_id_and_prefix(workspace: Workspace, tmp_path: Path) -> None:
    record = workspace.put(make_tree(tmp_path / "d", "x"), "dataset", name="ds")
    assert workspace.resolve("ds") == record.id
    assert workspace.resolve(record.id) == record.id
    assert workspace.resolve(record.id[:8]) == record.id
    assert workspace.resolve(record.id[:8].upper()) == record.id


def test_unknown_and_ambiguous_references(workspace: Workspace) -> None:
    with pytest.raises(NotFound, match="no artifact or alias named 'nope'"):
        workspace.resolve("nope")
    for tail in ("0", "1"):
        workspace.catalog.add_artifact(ArtifactRecord("beef" + tail * 60, "m", 1, 1, 0.0, None))
    with pytest.raises(InvalidInput, match="ambiguous"):
        workspace.resolve("beef")


def test_failed_put_marks_its_run_failed(
    workspace: Workspace, shipyard_home: Path, tmp_path: Path
) -> None:
    with pytest.raises(InvalidInput):
        workspace.put(tmp_path / "missing", "dataset")
    assert workspace.catalog.list_artifacts() == []
    with sqlite3.connect(shipyard_home / "catalog.db") as db:
        assert db.execute("SELECT kind, status FROM runs").fetchall() == [
            ("artifact-put", "failed")
        ]


def test_concurrent_alias_moves_from_one_state_have_exactly_one_winner(
    workspace: Workspace, tmp_path: Path
) -> None:
    """Six real processes move `prod` from the same state at once: one wins, five exit 3."""
    base = workspace.put(make_tree(tmp_path / "base", "base"), "model", name="prod")
    targets = [workspace.put(make_tree(tmp_path / f"m{i}", f"m{i}"), "model").id for i in range(6)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "shipyard", "alias", "set", "prod", t, "--expect", base.id],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for t in targets
    ]
    codes = sorted(proc.wait(60) for proc in procs)
    assert codes == [0, 3, 3, 3, 3, 3]
    assert workspace.catalog.get_alias("prod") in targets
    assert len(workspace.catalog.alias_history("prod")) == 2


def test_a_legacy_alias_that_spells_an_id_prefix_wins_and_says_so(
    workspace: Workspace, tmp_path: Path
) -> None:
    first = workspace.put(make_tree(tmp_path / "a", "a"), "dataset")
    second = workspace.put(make_tree(tmp_path / "b", "b"), "dataset")
    legacy = second.id[:6]
    # Made before alias names that read as id prefixes were refused: written behind the rule.
    with sqlite3.connect(workspace.catalog.path) as db:  # type: ignore[attr-defined]
        db.execute("INSERT INTO aliases VALUES (?, ?, 0)", (legacy, first.id))
    notes: list[str] = []
    workspace.note = notes.append
    assert workspace.resolve(legacy) == first.id
    assert len(notes) == 1
    assert f"'{legacy}' is an alias (→ {first.id[:16]})" in notes[0]
    assert f"prefixes artifact {second.id[:16]}" in notes[0] and "used the alias" in notes[0]
    assert workspace.resolve(second.id[:7]) == second.id
    assert len(notes) == 1  # a longer prefix is no alias: nothing to say
