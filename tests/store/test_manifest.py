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


def canonical(**changes: object) -> dict[str, object]:
    """A valid manifest's JSON with top-level fields changed; `file_` keys change its file."""
    raw = json.loads(make().canonical_bytes())
    for key, value in changes.items():
        if key.startswith("file_"):
            raw["files"][0][key[5:]] = value
        else:
            raw[key] = value
    return raw


def encode(raw: object) -> bytes:
    return json.dumps(raw, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


@pytest.mark.parametrize("mode", [0o4755, 0o2755, 0o1777, 0o7777, -1, 2**40, 2**80])
def test_modes_beyond_permission_bits_are_refused(mode: int) -> None:
    with pytest.raises(InvalidInput, match=r"dir/file\.bin'?: mode .* outside 0\.\.0o777"):
        Manifest.from_bytes(encode(canonical(file_mode=mode)))
    with pytest.raises(InvalidInput, match="mode"):
        make(files=(FileEntry("f", 0, mode, ()),))


@pytest.mark.parametrize(
    ("value", "field"),
    [
        (True, r"files\[0\]\.mode: True is a boolean"),
        (420.0, r"files\[0\]\.mode: 420\.0 is a number"),
        ("420", r"files\[0\]\.mode: '420' is a string"),
        (None, r"files\[0\]\.mode: None is null"),
    ],
)
def test_mode_must_be_a_json_integer(value: object, field: str) -> None:
    with pytest.raises(InvalidInput, match=field):
        Manifest.from_bytes(encode(canonical(file_mode=value)))


def test_the_canonical_encoding_parses_to_itself() -> None:
    data = make(metadata={"note": "é ✓", "n": [1, 2.5, None, True]}).canonical_bytes()
    assert Manifest.from_bytes(data).canonical_bytes() == data


@pytest.mark.parametrize(
    "variant",
    [
        lambda raw: json.dumps(raw, indent=2).encode(),
        lambda raw: json.dumps(raw, sort_keys=True).encode(),  # ", " and ": " separators
        lambda raw: json.dumps(dict(reversed(raw.items())), separators=(",", ":")).encode(),
        lambda raw: encode(raw) + b"\n",
        lambda raw: encode(raw).replace(b'"kind"', b'"kind":"x","kind"'),  # a duplicate key
        lambda raw: encode(raw).replace(b'"model"', b'"\\u006dodel"'),  # an escape not needed
    ],
    ids=["indented", "spaced", "unsorted", "newline", "duplicate-key", "escaped"],
)
def test_non_canonical_bytes_of_a_valid_manifest_are_refused(variant: object) -> None:
    data = variant(json.loads(make().canonical_bytes()))  # type: ignore[operator]
    assert json.loads(data) == json.loads(make().canonical_bytes())
    with pytest.raises(InvalidInput, match=f"not the canonical encoding.*{make().id}"):
        Manifest.from_bytes(data)


def test_unknown_and_missing_keys_are_refused_by_name() -> None:
    with pytest.raises(InvalidInput, match=r"unknown key.*'extra'"):
        Manifest.from_bytes(encode(canonical(extra=1)))
    with pytest.raises(InvalidInput, match=r"files\[0\]: unknown key.*'owner'"):
        Manifest.from_bytes(encode(canonical(file_owner="root")))
    raw = canonical()
    del raw["run"]
    with pytest.raises(InvalidInput, match=r"missing key.*'run'"):
        Manifest.from_bytes(encode(raw))


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (b'"size":10', r"files\[0\]\.size: inf"),
        (b'"piece_size":6', r"piece_size: nan"),
        (b'"mode":420', r"files\[0\]\.mode: -inf"),
    ],
)
def test_non_finite_numbers_are_refused_naming_the_field(text: bytes, field: str) -> None:
    bad = {b'"size":10': b'"size":Infinity', b'"piece_size":6': b'"piece_size":NaN'}
    replacement = bad.get(text, b'"mode":-Infinity')
    data = make().canonical_bytes().replace(text, replacement, 1)
    with pytest.raises(InvalidInput, match=field):
        Manifest.from_bytes(data)


def test_non_finite_metadata_is_refused() -> None:
    with pytest.raises(InvalidInput, match=r"metadata\.loss: inf is not a finite number"):
        Manifest.from_bytes(encode(canonical(metadata={"loss": float("inf")})))


@pytest.mark.parametrize(
    ("number", "field"),
    [
        (str(2**60), "{name} [0-9]+ is outside"),
        ("1" + "0" * 400, r"{name} 1000.*\.\.\. is outside"),  # cut short in the message
        ("9" * 5000, "malformed JSON"),  # past Python's limit on int digits
        (str(-(2**63)), "{name} -[0-9]+ is outside"),
    ],
    ids=["2**60", "10**400", "5000-digits", "-2**63"],
)
def test_huge_numbers_are_refused_naming_the_field(number: str, field: str) -> None:
    for name, text in [("size", b'"size":10'), ("piece_size", b'"piece_size":6')]:
        data = make().canonical_bytes().replace(text, f'"{name}":{number}'.encode())
        with pytest.raises(InvalidInput, match=field.format(name=name)):
            Manifest.from_bytes(data)


def test_a_piece_larger_than_the_piece_size_is_refused() -> None:
    entry = FileEntry("f", 10, 0o644, (PieceRef(HASH_A, 0, 10),))
    with pytest.raises(InvalidInput, match=r"piece 0: size 10 is outside 1\.\.6"):
        Manifest(kind="model", piece_size=6, files=(entry,))


@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_deeply_nested_json_is_refused(depth: int) -> None:
    with pytest.raises(InvalidInput, match=r"malformed JSON|nested"):
        Manifest.from_bytes(b"[" * depth + b"]" * depth)
    nested = b'{"a":' * depth + b"1" + b"}" * depth
    data = encode(canonical()).replace(b'"metadata":{}', b'"metadata":' + nested)
    with pytest.raises(InvalidInput, match=r"malformed JSON|metadata.*nested deeper"):
        Manifest.from_bytes(data)


def test_metadata_a_little_deep_is_refused_by_the_depth_bound() -> None:
    value: object = 1
    for _ in range(40):
        value = {"a": value}
    with pytest.raises(InvalidInput, match=r"metadata.a.a.*nested deeper than 32"):
        Manifest.from_bytes(encode(canonical(metadata=value)))


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("x" * 256, "too long"),
        ("d/" + "é" * 128, "too long"),  # 256 bytes in 128 characters
        ("/".join(["d" * 200] * 21), "too long"),
        ("a\x00b", "NUL"),
        ("/abs", "absolute"),
        ("a/../b", r"'\.\.'"),
        ("a\udcffb", "UTF-8"),
    ],
)
def test_paths_that_cannot_be_created_safely_are_refused(path: str, why: str) -> None:
    with pytest.raises(InvalidInput, match=why):
        make(path)


def test_a_path_component_of_255_bytes_is_accepted() -> None:
    assert make("d/" + "x" * 255).files[0].path.endswith("x" * 255)


def test_files_out_of_order_are_refused() -> None:
    raw = json.loads(make().canonical_bytes())
    second = dict(raw["files"][0], path="a.bin")
    raw["files"].append(second)  # "a.bin" after "dir/file.bin"
    with pytest.raises(InvalidInput, match="sorted and unique"):
        Manifest.from_bytes(encode(raw))


@pytest.mark.parametrize(
    "data", [b"", b"null", b"[]", b'"x"', b"{}", b'{"format":true}', b"\xff\xfe", b"1e999"]
)
def test_bytes_that_are_not_a_manifest_are_refused(data: bytes) -> None:
    with pytest.raises(InvalidInput, match=r"^where: "):
        Manifest.from_bytes(data, where="where")
