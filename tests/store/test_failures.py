"""Failures a real deployment meets: a full disk, a put killed mid-way."""

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shipyard.errors import StorageError
from shipyard.store import LocalBackend, PieceStore, materialize, put_tree, verify
from shipyard.store.pieces import PIECES
from shipyard.workspace import Workspace

PIECE = 64 << 10


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs: a real filesystem that really runs out of space."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "tiny"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], check=True)
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=True)


@pytest.mark.root
def test_full_disk_fails_clearly_and_keeps_what_was_stored(tiny_disk: Path, tmp_path: Path) -> None:
    pieces = PieceStore(LocalBackend(tiny_disk / "store"))
    small = tmp_path / "small"
    small.mkdir()
    (small / "a.bin").write_bytes(os.urandom(200_000))
    kept = put_tree(pieces, small, "model", piece_size=PIECE)
    big = tmp_path / "big"
    big.mkdir()
    (big / "b.bin").write_bytes(os.urandom(4 << 20))
    with pytest.raises(StorageError, match="disk full"):
        put_tree(pieces, big, "model", piece_size=PIECE)
    assert list((tiny_disk / "store" / ".tmp").iterdir()) == []
    assert list(pieces.manifest_ids()) == [kept.id]
    assert verify(pieces, kept) == []


def make_source(root: Path, files: int = 4, size: int = 6 << 20) -> Path:
    root.mkdir(parents=True)
    for index in range(files):
        (root / f"shard-{index}.bin").write_bytes(os.urandom(size))
    return root


def _put_command(src: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "shipyard",
        "artifact",
        "put",
        str(src),
        "--kind",
        "dataset",
        "--piece-size-mib",
        "1",
        "--name",
        "ds",
    ]


@pytest.mark.slow
def test_put_killed_at_random_moments_leaves_nothing_partial_and_rerun_completes(
    workspace: Workspace, tmp_path: Path
) -> None:
    rng = random.Random(7)
    for attempt in range(5):
        src = make_source(tmp_path / f"src-{attempt}")
        before = _piece_count(workspace)
        proc = subprocess.Popen(_put_command(src), stdout=subprocess.PIPE, env=os.environ)
        # Kill once this put has stored a random number of its 24 pieces: always mid-put.
        target = before + rng.randint(1, 20)
        while proc.poll() is None and _piece_count(workspace) < target:
            time.sleep(0.002)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL
        stored_by_killed_put = _piece_count(workspace) - before
        assert list(workspace.pieces.manifest_ids()) == []
        _assert_store_consistent(workspace)
    stored_before_rerun = _piece_count(workspace)
    done = subprocess.run(_put_command(src), capture_output=True, text=True, env=os.environ)
    assert done.returncode == 0, done.stderr
    # The rerun wrote only the pieces the killed put had not stored.
    assert _piece_count(workspace) == stored_before_rerun + 24 - stored_by_killed_put
    artifact_id = done.stdout.strip().splitlines()[-1]
    assert workspace.resolve("ds") == artifact_id
    workspace.get("ds", tmp_path / "out")
    for index in range(4):
        name = f"shard-{index}.bin"
        assert (tmp_path / "out" / name).read_bytes() == (src / name).read_bytes()


def _piece_count(ws: Workspace) -> int:
    return sum(1 for _ in ws.pieces.backend.list(PIECES))


def _assert_store_consistent(ws: Workspace) -> None:
    """Every visible piece and manifest is whole; every cataloged artifact is complete."""
    for info in ws.pieces.backend.list(PIECES):
        ws.pieces.get_piece(info.key.rsplit("/", 1)[-1])
    for artifact_id in ws.pieces.manifest_ids():
        assert verify(ws.pieces, ws.pieces.get_manifest(artifact_id)) == []
    for record in ws.catalog.list_artifacts():
        assert ws.pieces.has_manifest(record.id)


def test_interrupted_get_leaves_no_partial_destination(
    workspace: Workspace, tmp_path: Path
) -> None:
    src = make_source(tmp_path / "src")
    manifest = put_tree(workspace.pieces, src, "dataset", piece_size=1 << 20)
    calls = 0

    def interrupt_midway(_n: int) -> None:
        nonlocal calls
        calls += 1
        if calls == 10:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        materialize(workspace.pieces, manifest, tmp_path / "out", progress=interrupt_midway)
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out")] == []
