"""The real `shipyard` command: output contract and exit codes."""

import os
import shutil
import sqlite3
import subprocess
import sys
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


def permissions_bind() -> list[str]:
    """A command prefix under which file permissions bind, even for root: root keeps its uid
    (so it can still run this interpreter) but loses the capabilities that override them."""
    if os.geteuid() != 0:
        return []
    prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    if shutil.which("setpriv") is None or subprocess.run([*prefix, "true"]).returncode != 0:
        pytest.skip("root here cannot drop the capabilities that override file permissions")
    return prefix


def cli_where_permissions_bind(*args: str) -> subprocess.CompletedProcess[str]:
    command = [*permissions_bind(), sys.executable, "-m", "shipyard", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_put_refuses_a_directory_it_cannot_read(cli: Cli, source: Path) -> None:
    (source / "secret").mkdir()
    (source / "secret" / "weights.bin").write_bytes(b"unseen")
    os.chmod(source / "secret", 0)
    try:
        result = cli_where_permissions_bind("artifact", "put", str(source), "--kind", "model")
    finally:
        os.chmod(source / "secret", 0o755)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"cannot read source directory {source}/secret: Permission denied" in result.stderr
    assert cli("artifact", "ls").stdout == ""


def test_put_refuses_a_symlink_loop_by_name(cli: Cli, source: Path) -> None:
    (source / "loop").symlink_to("loop")
    result = cli("artifact", "put", str(source), "--kind", "model")
    assert result.returncode == 2
    assert result.stderr == f"error: {source}/loop: symlink loop\n"


def test_put_notes_the_empty_directories_it_leaves_out(
    cli: Cli, source: Path, tmp_path: Path
) -> None:
    (source / "logs").mkdir()
    artifact_id = put(cli, source)
    shown = cli("artifact", "show", artifact_id).stdout
    assert "logs" not in shown
    result = cli("artifact", "put", str(source), "--kind", "model", "--piece-size-mib", "1")
    assert "note: empty directories are not stored (1: logs)" in result.stderr


def test_get_into_an_unwritable_directory_exits_6_naming_it(
    cli: Cli, source: Path, tmp_path: Path, shipyard_home: Path
) -> None:
    artifact_id = put(cli, source)
    locked = tmp_path / "locked"
    locked.mkdir()
    os.chmod(locked, 0o555)
    result = cli_where_permissions_bind("artifact", "get", artifact_id, str(locked / "out"))
    assert result.returncode == 6, result.stdout + result.stderr
    assert f"cannot write destination {locked}/out: Permission denied" in result.stderr
    assert list(locked.iterdir()) == []


@pytest.mark.parametrize("damage", ["empty", "garbage"])
def test_a_damaged_catalog_exits_6_naming_the_file(
    cli: Cli, source: Path, shipyard_home: Path, damage: str
) -> None:
    put(cli, source, "--name", "m")
    catalog = shipyard_home / "catalog.db"
    bad = b"" if damage == "empty" else os.urandom(catalog.stat().st_size)
    catalog.write_bytes(bad)
    for command in (["artifact", "ls"], ["alias", "ls"], ["artifact", "get", "m", "out"]):
        result = cli(*command)
        assert result.returncode == 6, result.stderr
        assert result.stderr.startswith(f"error: catalog {catalog}")
        assert "Traceback" not in result.stderr
    assert catalog.read_bytes() == bad


def test_alias_history_of_an_unknown_name_exits_4(cli: Cli) -> None:
    result = cli("alias", "history", "unknown")
    assert result.returncode == 4
    assert "no alias named 'unknown'" in result.stderr


@pytest.mark.parametrize(
    ("name", "why"),
    [("-rf", "would read as an option"), ("a1ff", "id prefix"), ("C0FFEE", "id prefix")],
)
def test_alias_names_that_read_as_options_or_ids_exit_2(
    cli: Cli, source: Path, name: str, why: str
) -> None:
    artifact_id = put(cli, source, "--name", "m")
    result = cli("alias", "set", "--", name, "m")
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: alias {name!r}") and why in result.stderr
    assert cli("alias", "ls").stdout == f"m  {artifact_id}\n"


def test_ls_into_a_pipe_that_closes_early_ends_quietly(cli: Cli, shipyard_home: Path) -> None:
    Workspace.open(shipyard_home).close()
    rows = [(f"{i:064x}", "dataset", i, 1, float(i), None, "{}") for i in range(5000)]
    with sqlite3.connect(shipyard_home / "catalog.db") as db:
        db.executemany("INSERT INTO artifacts VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    shipyard = f"{sys.executable} -m shipyard"
    result = subprocess.run(
        ["bash", "-c", f"{shipyard} artifact ls | head -1; echo ${{PIPESTATUS[0]}} >&2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.stdout.startswith("0" * 16)
    assert len(result.stdout.splitlines()) == 1
    assert "Traceback" not in result.stderr and "Broken pipe" not in result.stderr, result.stderr
