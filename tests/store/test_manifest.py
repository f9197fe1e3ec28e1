import json

import pytest

from shipyard.errors import InvalidInput
from shipyard.store import FileEntry, Manifest, PieceRef

HASH_A = "a" * 64
HASH_B = "b" * 64


def make(path: str = "dir/file.bin", **overrides: object) -> Manifest:
    entry = FileEntry(path, 10, 0o644, (PieceRef(HASH_A, 0, 6), PieceRef(HASH_B, 6, 4)))
    fields: dict[str, object] = {"kind": "model", "piece_size": 6, "files": (entry,)}
    fields.update(overrides)
    return Manifest(**fields)  # type: ignore[arg-type]


def test_id_is_stable_and_changes_with_content() -> None:
    assert make().id == make().id
    assert Manifest.from_bytes(make().canonical_bytes()).id == make().id
    assert make(metadata={"x": 1}).id != make().id
    assert make("other.bin").id != make().id


def test_canonical_bytes_sort_keys_without_whitespace() -> None:
    raw = make(metadata={"b": 1, "a": 2}).canonical_bytes()
    assert b" " not in raw
    assert raw.index(b'"a":2') < raw.index(b'"b":1')
    assert json.loads(raw)["format"] == 1


@pytest.mark.parametrize(
    "path", ["/etc/passwd", "../escape", "a/../../b", "a//b", "./a", "a\\b", "", "a/."]
)
def test_escaping_or_odd_paths_are_refused(path: str) -> None:
    with pytest.raises(InvalidInput, match="path"):
        make(path)


def test_parsed_manifest_with_dotdot_path_is_refused() -> None:
    raw = json.loads(make().canonical_bytes())
    raw["files"][0]["path"] = "../../outside"
    with pytest.raises(InvalidInput, match=r"\.\."):
        Manifest.from_bytes(json.dumps(raw).encode())


def test_file_under_another_file_is_refused() -> None:
    entry = FileEntry("a", 0, 0o644, ())
    nested = FileEntry("a/b", 0, 0o644, ())
    with pytest.raises(InvalidInput, match="lies under file"):
        Manifest(kind="model", piece_size=6, files=(entry, nested))


def test_gaps_between_pieces_are_refused() -> None:
    entry = FileEntry("f", 10, 0o644, (PieceRef(HASH_A, 0, 6), PieceRef(HASH_B, 7, 3)))
    with pytest.raises(InvalidInput, match="contiguous"):
        Manifest(kind="model", piece_size=6, files=(entry,))


def test_malformed_and_unknown_format_are_refused() -> None:
    with pytest.raises(InvalidInput, match="malformed"):
        Manifest.from_bytes(b"{not json")
    raw = json.loads(make().canonical_bytes())
    raw["format"] = 99
    with pytest.raises(InvalidInput, match="unsupported format"):
        Manifest.from_bytes(json.dumps(raw).encode())
