"""Put, get and verify against both backends, including every corruption path."""

import json
import os
import stat
from pathlib import Path

import pytest

from shipyard.errors import IntegrityError, InvalidInput, StorageError
from shipyard.hashing import sha256_hex
from shipyard.store import PieceStore, materialize, put_tree, verify
from shipyard.store.pieces import manifest_key, piece_key
from shipyard.store.put import scan_source

PIECE = 64 << 10


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_round_trip_preserves_bytes_modes_and_layout(
    pieces: PieceStore, model_dir: Path, tmp_path: Path
) -> None:
    manifest = put_tree(pieces, model_dir, "model", piece_size=PIECE)
    assert [f.path for f in manifest.files] == [
        "config.json",
        "empty",
        "sub/weights-2.bin",
        "weights-1.bin",
    ]
    assert len(manifest.files[3].pieces) == 5  # 300,000 bytes in 64 KiB pieces
    dest = tmp_path / "out"
    materialize(pieces, pieces.get_manifest(manifest.id), dest)
    assert tree_bytes(dest) == tree_bytes(model_dir)
    assert stat.S_IMODE((dest / "config.json").stat().st_mode) == 0o600
    assert verify(pieces, manifest) == []


def test_second_put_writes_no_piece_and_gives_the_same_id(
    pieces: PieceStore, model_dir: Path
) -> None:
    first = put_tree(pieces, model_dir, "model", piece_size=PIECE)
    before = {info.key: info.mtime for info in pieces.backend.list("pieces/")}
    second = put_tree(pieces, model_dir, "model", piece_size=PIECE)
    after = {info.key: info.mtime for info in pieces.backend.list("pieces/")}
    assert second.id == first.id
    assert before == after


def test_single_file_source(pieces: PieceStore, model_dir: Path, tmp_path: Path) -> None:
    manifest = put_tree(pieces, model_dir / "weights-1.bin", "blob", piece_size=PIECE)
    materialize(pieces, manifest, tmp_path / "out")
    assert (tmp_path / "out" / "weights-1.bin").read_bytes() == (
        model_dir / "weights-1.bin"
    ).read_bytes()


def test_corrupt_piece_fails_get_naming_file_and_piece_and_leaves_nothing(
    pieces: PieceStore, model_dir: Path, tmp_path: Path
) -> None:
    manifest = put_tree(pieces, model_dir, "model", piece_size=PIECE)
    bad = manifest.files[3].pieces[2]
    good = pieces.backend.get(piece_key(bad.hash))
    pieces.backend.put(piece_key(bad.hash), good[:-1] + bytes([good[-1] ^ 1]))
    dest = tmp_path / "out"
    with pytest.raises(IntegrityError, match=r"weights-1\.bin: piece 2 .*corrupt"):
        materialize(pieces, manifest, dest)
    assert not dest.exists()
    assert list(tmp_path.glob(".out*")) == []
    problems = verify(pieces, manifest)
    assert [(p.path, p.piece_index, p.reason) for p in problems] == [
        ("weights-1.bin", 2, "corrupt")
    ]


def test_missing_piece_fails_get_and_verify_reports_it(
    pieces: PieceStore, model_dir: Path, tmp_path: Path
) -> None:
    manifest = put_tree(pieces, model_dir, "model", piece_size=PIECE)
    gone = manifest.files[2].pieces[0]
    pieces.backend.delete(piece_key(gone.hash))
    with pytest.raises(IntegrityError, match=r"sub/weights-2\.bin: piece 0 .*missing"):
        materialize(pieces, manifest, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert [p.reason for p in verify(pieces, manifest)] == ["missing"]


def test_get_refuses_a_non_empty_destination(
    pieces: PieceStore, model_dir: Path, tmp_path: Path
) -> None:
    manifest = put_tree(pieces, model_dir, "model", piece_size=PIECE)
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "keep.txt").write_text("mine")
    with pytest.raises(InvalidInput, match="not an empty directory"):
        materialize(pieces, manifest, dest)
    assert (dest / "keep.txt").read_text() == "mine"


def test_stored_manifest_with_dotdot_path_is_refused_on_get(pieces: PieceStore) -> None:
    piece_hash = sha256_hex(b"evil")
    pieces.backend.put(piece_key(piece_hash), b"evil")
    raw = {
        "format": 1,
        "kind": "model",
        "piece_size": PIECE,
        "files": [{"path": "../../evil", "size": 4, "mode": 420, "pieces": [[piece_hash, 0, 4]]}],
        "metadata": {},
        "run": None,
    }
    data = json.dumps(raw).encode()
    artifact_id = sha256_hex(data)
    pieces.backend.put(manifest_key(artifact_id), data)
    with pytest.raises(InvalidInput, match=r"\.\."):
        pieces.get_manifest(artifact_id)


def test_manifest_bytes_not_matching_the_id_are_refused(
    pieces: PieceStore, model_dir: Path
) -> None:
    manifest = put_tree(pieces, model_dir, "model", piece_size=PIECE)
    tampered = manifest.canonical_bytes().replace(b'"model"', b'"dataset"')
    pieces.backend.put(manifest_key(manifest.id), tampered)
    with pytest.raises(IntegrityError, match="do not match the artifact id"):
        pieces.get_manifest(manifest.id)


def test_put_refuses_a_symlink_out_of_the_source(pieces: PieceStore, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("do not ship")
    src = tmp_path / "src"
    src.mkdir()
    (src / "link").symlink_to(secret)
    with pytest.raises(InvalidInput, match="points outside the source"):
        put_tree(pieces, src, "model", piece_size=PIECE)
    assert list(pieces.manifest_ids()) == []


def test_put_stores_a_symlink_inside_the_source_as_its_content(
    pieces: PieceStore, tmp_path: Path
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "blob").write_bytes(b"weights")
    (src / "alias").symlink_to("blob")
    manifest = put_tree(pieces, src, "model", piece_size=PIECE)
    materialize(pieces, manifest, tmp_path / "out")
    assert (tmp_path / "out" / "alias").read_bytes() == b"weights"
    assert not (tmp_path / "out" / "alias").is_symlink()


@pytest.mark.parametrize("kind", ["dangling symlink", "fifo"])
def test_unreadable_source_file_is_refused_before_anything_is_stored(
    pieces: PieceStore, tmp_path: Path, kind: str
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.bin").write_bytes(os.urandom(1000))
    if kind == "fifo":
        os.mkfifo(src / "z.bad")
    else:
        (src / "z.bad").symlink_to(src / "gone")
    with pytest.raises(InvalidInput, match=r"z\.bad"):
        put_tree(pieces, src, "model", piece_size=PIECE)
    assert list(pieces.backend.list("pieces/")) == []
    assert list(pieces.manifest_ids()) == []


def test_piece_size_out_of_range_is_refused(pieces: PieceStore, model_dir: Path) -> None:
    with pytest.raises(InvalidInput, match="piece_size"):
        put_tree(pieces, model_dir, "model", piece_size=1000)


def test_put_refuses_a_symlink_loop_by_name(pieces: PieceStore, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.bin").write_bytes(b"a")
    (src / "loop-1").symlink_to("loop-2")
    (src / "loop-2").symlink_to("loop-1")
    with pytest.raises(InvalidInput, match=r"loop-1: symlink loop"):
        put_tree(pieces, src, "model", piece_size=PIECE)
    assert list(pieces.manifest_ids()) == []


def test_empty_directories_are_reported_and_not_stored(pieces: PieceStore, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "logs").mkdir(parents=True)
    (src / "a" / "b").mkdir(parents=True)
    (src / "kept").mkdir()
    (src / "kept" / "f").write_bytes(b"f")
    assert scan_source(src).empty_dirs == ["a/b", "logs"]
    manifest = put_tree(pieces, src, "model", piece_size=PIECE)
    assert [f.path for f in manifest.files] == ["kept/f"]
    materialize(pieces, manifest, tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["kept"]


def test_setuid_and_sticky_bits_are_neither_stored_nor_applied(
    pieces: PieceStore, tmp_path: Path
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "tool").write_bytes(b"#!/bin/sh\n")
    os.chmod(src / "tool", 0o7755)
    manifest = put_tree(pieces, src, "model", piece_size=PIECE)
    assert manifest.files[0].mode == 0o755
    materialize(pieces, manifest, tmp_path / "out")
    assert stat.S_IMODE((tmp_path / "out" / "tool").stat().st_mode) == 0o755


def test_stored_manifest_with_a_setuid_mode_is_refused_and_writes_nothing(
    pieces: PieceStore, tmp_path: Path
) -> None:
    piece_hash = sha256_hex(b"tool")
    pieces.backend.put(piece_key(piece_hash), b"tool")
    entry = {"mode": 0o4755, "path": "tool", "pieces": [[piece_hash, 0, 4]], "size": 4}
    raw = {"files": [entry], "format": 1, "kind": "model", "metadata": {}, "piece_size": PIECE}
    data = json.dumps(dict(raw, run=None), sort_keys=True, separators=(",", ":")).encode()
    artifact_id = sha256_hex(data)
    pieces.backend.put(manifest_key(artifact_id), data)
    with pytest.raises(InvalidInput, match=r"'tool': mode 0o4755 is outside 0\.\.0o777"):
        pieces.get_manifest(artifact_id)


def test_get_into_a_destination_that_cannot_be_made_is_a_storage_error(
    pieces: PieceStore, model_dir: Path, tmp_path: Path
) -> None:
    manifest = put_tree(pieces, model_dir, "model", piece_size=PIECE)
    blocker = tmp_path / "a-file"
    blocker.write_text("in the way")
    with pytest.raises(StorageError, match=f"cannot write destination {blocker}/out"):
        materialize(pieces, manifest, blocker / "out")
    assert blocker.read_text() == "in the way"
