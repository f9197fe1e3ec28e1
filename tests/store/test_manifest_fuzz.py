"""Property-based tests of the artifact manifest parser, which reads bytes from other teams, peers
and shared buckets. Only Shipyard's own errors may escape it, and whatever it accepts is the
canonical encoding of what it parsed: one artifact, one id."""

import json
from pathlib import PurePosixPath
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shipyard.errors import ShipyardError
from shipyard.hashing import sha256_hex
from shipyard.store import FileEntry, Manifest, PieceRef
from shipyard.store.manifest import MAX_MODE

pytestmark = pytest.mark.fuzz
BOUNDED = settings(max_examples=200, deadline=None)

_NAME = st.text(st.characters(codec="utf-8", exclude_characters="/\\\x00"), min_size=1, max_size=8)
_PATH = st.lists(_NAME.filter(lambda n: n not in (".", "..")), min_size=1, max_size=3).map("/".join)
_HASH = st.binary(min_size=1, max_size=8).map(sha256_hex)
_JSON_LEAF = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(codec="utf-8"), max_size=8)
)
_JSON = st.recursive(
    _JSON_LEAF,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
# What a hostile manifest might put anywhere: any JSON value, and the numbers JSON cannot say.
_HOSTILE = _JSON | st.sampled_from([float("inf"), float("-inf"), float("nan"), 2**64, -1, 1.0])


def _no_file_under_another(paths: list[str]) -> bool:
    return not any(str(parent) in paths for path in paths for parent in PurePosixPath(path).parents)


@st.composite
def manifests(draw: st.DrawFn) -> Manifest:
    """Valid manifests: sorted files whose pieces tile them, any mode, free metadata."""
    piece_size = draw(st.integers(1, 1 << 20))
    paths = draw(st.lists(_PATH, unique=True, max_size=4).filter(_no_file_under_another))
    files = []
    for path in sorted(paths):
        sizes = draw(st.lists(st.integers(1, piece_size), max_size=3))
        offsets = [sum(sizes[:i]) for i in range(len(sizes))]
        pieces = tuple(PieceRef(draw(_HASH), o, s) for o, s in zip(offsets, sizes, strict=True))
        files.append(FileEntry(path, sum(sizes), draw(st.integers(0, MAX_MODE)), pieces))
    return Manifest(
        kind=draw(st.sampled_from(["model", "dataset", "eval-report", "tok_1"])),
        piece_size=piece_size,
        files=tuple(files),
        metadata=draw(st.dictionaries(st.text(max_size=6), _JSON, max_size=3)),
        run=draw(st.none() | st.text(min_size=1, max_size=20).filter(_utf8)),
    )


def _utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def parse_or_refuse(data: bytes) -> Manifest | None:
    """The parser's verdict: a manifest whose canonical bytes are `data`, or a refusal as one of
    Shipyard's errors. Any other exception fails the test."""
    try:
        manifest = Manifest.from_bytes(data)
    except ShipyardError:
        return None
    assert manifest.canonical_bytes() == data
    assert manifest.id == sha256_hex(data)
    assert all(0 <= f.mode <= MAX_MODE for f in manifest.files)
    return manifest


@BOUNDED
@given(manifests())
def test_every_valid_manifest_round_trips_through_its_canonical_bytes(manifest: Manifest) -> None:
    assert parse_or_refuse(manifest.canonical_bytes()) == manifest


@BOUNDED
@given(st.binary(max_size=512))
def test_random_bytes_are_refused_or_canonical(data: bytes) -> None:
    parse_or_refuse(data)


@st.composite
def byte_mutations(draw: st.DrawFn) -> bytes:
    """A valid manifest's bytes with a few bytes flipped, cut, repeated or spliced in."""
    data = bytearray(draw(manifests()).canonical_bytes())
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        end = draw(st.integers(at, min(len(data), at + 16)))
        action = draw(st.sampled_from(["flip", "cut", "repeat", "splice"]))
        if action == "flip" and at < len(data):
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif action == "cut":
            del data[at:end]
        elif action == "repeat":
            data[at:at] = data[at:end]
        else:
            token = draw(
                st.sampled_from([b" ", b"\n", b"-", b"1e999", b"NaN", b"Infinity", b"[", b"{"])
                | st.binary(max_size=4)
            )
            data[at:at] = token
    return bytes(data)


@BOUNDED
@given(byte_mutations())
def test_byte_mutations_of_a_valid_manifest_are_refused_or_canonical(data: bytes) -> None:
    parse_or_refuse(data)


def _fields(value: Any, where: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in parsed JSON: object keys and array indexes, as paths from the top."""
    places = [where]
    if isinstance(value, dict):
        for key, item in value.items():
            places += _fields(item, (*where, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            places += _fields(item, (*where, index))
    return places


@st.composite
def field_mutations(draw: st.DrawFn) -> bytes:
    """A valid manifest with one field replaced, removed or joined by a stranger, re-encoded
    canonically (so only the value, not the encoding, is wrong)."""
    raw = json.loads(draw(manifests()).canonical_bytes())
    place = draw(st.sampled_from(_fields(raw)[1:]))
    *parents, last = place
    holder = raw
    for step in parents:
        holder = holder[step]
    action = draw(st.sampled_from(["replace", "remove", "add"]))
    if action == "replace":
        holder[last] = draw(_HOSTILE)
    elif action == "remove":
        del holder[last]
    elif isinstance(holder, dict):
        holder[draw(st.text(max_size=6))] = draw(_HOSTILE)
    else:
        holder.insert(last, draw(_HOSTILE))
    return json.dumps(raw, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
        errors="surrogatepass"
    )


@BOUNDED
@given(field_mutations())
def test_field_mutations_of_a_valid_manifest_are_refused_or_canonical(data: bytes) -> None:
    parse_or_refuse(data)
