"""The real `shipyard` command: output contract and exit codes."""

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from shipyard.workspace import Workspace

Cli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def source(tmp_path: Path) -> Path:
    root = tmp_path / "model"
    root.mkdir()
    (root / "weights.bin").write_bytes(os.urandom(3 << 20))
    (root / "config.json").write_text("{}")
    return root


def put(cli: Cli, path: Path, *extra: str) -> str:
    result = cli("artifact", "put", str(path), "--kind", "model", "--piece-size-mib", "1", *extra)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def test_put_prints_the_id_last_and_get_materializes(
    cli: Cli, source: Path, tmp_path: Path
) -> None:
    artifact_id = put(cli, source, "--name", "m")
    assert len(artifact_id) == 64
    result = cli("artifact", "get", "m", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "weights.bin").read_bytes() == (source / "weights.bin").read_bytes()
    listing = cli("artifact", "ls").stdout
    assert artifact_id[:16] in listing and " m" in listing
    shown = cli("artifact", "show", artifact_id[:10]).stdout
    assert "weights.bin" in shown and "aliases:    m" in shown
    assert cli("artifact", "verify", "m").returncode == 0


def test_verify_and_get_fail_with_exit_5_on_a_corrupt_piece(
    cli: Cli, source: Path, tmp_path: Path, shipyard_home: Path
) -> None:
    artifact_id = put(cli, source)
    ws = Workspace.open(shipyard_home)
    victim = ws.pieces.get_manifest(artifact_id).files[1].pieces[1]
    path = shipyard_home / "store" / "pieces" / victim.hash[:2] / victim.hash
    path.write_bytes(b"garbage")
    verify = cli("artifact", "verify", artifact_id)
    assert verify.returncode == 5
    assert "weights.bin: piece 1" in verify.stdout
    get = cli("artifact", "get", artifact_id, str(tmp_path / "out"))
    assert get.returncode == 5
    assert "weights.bin: piece 1" in get.stderr
    assert not (tmp_path / "out").exists()


def test_unknown_reference_exits_4(cli: Cli, tmp_path: Path) -> None:
    result = cli("artifact", "get", "no-such-thing", str(tmp_path / "out"))
    assert result.returncode == 4
    assert "no artifact or alias named 'no-such-thing'" in result.stderr


def test_bad_input_exits_2_with_the_reason(cli: Cli, tmp_path: Path) -> None:
    result = cli("artifact", "put", str(tmp_path / "missing"), "--kind", "model")
    assert result.returncode == 2
    assert "does not exist" in result.stderr


def test_alias_set_conflict_exits_3_and_history_lists_moves(
    cli: Cli, source: Path, tmp_path: Path
) -> None:
    first = put(cli, source, "--name", "prod")
    (source / "config.json").write_text('{"v": 2}')
    second = put(cli, source)
    assert cli("alias", "set", "prod", second, "--expect", first).returncode == 0
    conflict = cli("alias", "set", "prod", first, "--expect", first)
    assert conflict.returncode == 3
    assert "points at" in conflict.stderr
    history = cli("alias", "history", "prod").stdout.splitlines()
    assert len(history) == 2
    assert f"{first[:16]} → {second[:16]}" in history[1]


def test_lineage_up_and_down(cli: Cli, source: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "train.jsonl").write_text('{"text": "hi"}\n')
    data = cli("artifact", "put", str(data_dir), "--kind", "dataset", "--name", "ds")
    data_id = data.stdout.strip().splitlines()[-1]
    model_id = put(cli, source, "--input", "ds", "--name", "prod")
    up = cli("lineage", "prod", "--up").stdout
    assert data_id[:16] in up and "dataset (ds)" in up and "artifact-put" in up
    down = cli("lineage", "ds", "--down").stdout
    assert model_id[:16] in down and "model (prod)" in down


def test_gc_reports_what_it_deleted(cli: Cli, source: Path, shipyard_home: Path) -> None:
    put(cli, source)
    Workspace.open(shipyard_home).pieces.put_piece(b"orphan")
    result = cli("gc")
    assert result.returncode == 0, result.stderr
    assert "deleted 1 pieces (6 bytes)" in result.stdout


def test_put_and_get_through_s3(
    cli: Cli, source: Path, tmp_path: Path, s3_store_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHIPYARD_STORE", s3_store_uri)
    artifact_id = put(cli, source, "--name", "m")
    result = cli("artifact", "get", "m", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "weights.bin").read_bytes() == (source / "weights.bin").read_bytes()
    assert cli("artifact", "verify", artifact_id).returncode == 0


def test_demo_runs_end_to_end(cli: Cli) -> None:
    result = cli("demo", timeout=600)
    assert result.returncode == 0, result.stderr
    assert "verified" in result.stdout
    assert "demo-model" in result.stdout
