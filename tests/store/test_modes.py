"""The modes `get` gives files from a manifest: the manifest's read and execute bits and its
owner's write bit, within the umask; never group or other write, never setuid."""

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from shipyard.errors import InvalidInput
from shipyard.hashing import sha256_hex
from shipyard.store import LocalBackend, PieceStore, materialize, put_tree
from shipyard.store.modes import current_umask, written_mode
from shipyard.store.pieces import manifest_key, piece_key

HOSTILE = {"all.bin": 0o777, "shared.txt": 0o666, "private": 0o600, "readonly": 0o444}


@pytest.fixture
def umask() -> Iterator[None]:
    before = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(before)


def hostile_artifact(root: Path) -> tuple[PieceStore, str]:
    source = root / "src"
    source.mkdir()
    for name, mode in HOSTILE.items():
        (source / name).write_bytes(name.encode())
        (source / name).chmod(mode)
    pieces = PieceStore(LocalBackend(root / "store", fsync=False))
    return pieces, put_tree(pieces, source, "model", 64 << 10).id


@pytest.mark.usefixtures("umask")
@pytest.mark.parametrize(
    ("mask", "expected"),
    [
        (0o022, {"all.bin": 0o755, "shared.txt": 0o644, "private": 0o600, "readonly": 0o444}),
        (0o077, {"all.bin": 0o700, "shared.txt": 0o600, "private": 0o600, "readonly": 0o400}),
        (0o000, {"all.bin": 0o755, "shared.txt": 0o644, "private": 0o600, "readonly": 0o444}),
    ],
    ids=["umask-022", "umask-077", "umask-000"],
)
def test_get_never_writes_group_or_other_writable_files_and_honours_the_umask(
    tmp_path: Path, mask: int, expected: dict[str, int]
) -> None:
    pieces, artifact = hostile_artifact(tmp_path)
    manifest = pieces.get_manifest(artifact)
    assert {f.path: f.mode for f in manifest.files} == HOSTILE  # the manifest asks for them
    os.umask(mask)
    materialize(pieces, manifest, tmp_path / "out")
    written = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "out").iterdir()}
    assert written == expected


def test_a_setuid_mode_in_a_stored_manifest_is_refused_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    pieces = PieceStore(LocalBackend(tmp_path / "store", fsync=False))
    piece_hash = sha256_hex(b"#!/bin/sh\n")
    pieces.backend.put(piece_key(piece_hash), b"#!/bin/sh\n")
    raw = {
        "format": 1,
        "kind": "model",
        "piece_size": 64 << 10,
        "files": [{"path": "run", "size": 10, "mode": 0o4755, "pieces": [[piece_hash, 0, 10]]}],
        "metadata": {},
        "run": None,
    }
    data = json.dumps(raw, sort_keys=True, separators=(",", ":")).encode()
    pieces.backend.put(manifest_key(sha256_hex(data)), data)
    with pytest.raises(InvalidInput, match=r"mode .* outside 0\.\.0o777"):
        pieces.get_manifest(sha256_hex(data))
    assert not (tmp_path / "out").exists()


@pytest.mark.usefixtures("umask")
def test_the_umask_is_read_without_changing_it() -> None:
    os.umask(0o027)
    assert current_umask() == 0o027
    assert current_umask() == 0o027
    assert written_mode(0o7777) == 0o750
