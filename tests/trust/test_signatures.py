"""Signature documents and files: round trips, tampering, and hostile bytes."""

import base64
import json
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.trust.conftest import make_key

from shipyard.errors import InvalidInput, StorageError
from shipyard.store import FileEntry, Manifest, PieceRef
from shipyard.trust.keys import generate, load_public_key, load_signing_key
from shipyard.trust.signatures import (
    MAX_FILE_BYTES,
    Signature,
    encode_signatures,
    parse_signatures,
    sign,
)

MANIFEST = Manifest(
    kind="model",
    piece_size=1 << 20,
    files=(FileEntry("w.bin", 3, 0o644, (PieceRef("ab" * 32, 0, 3),)),),
)


@pytest.mark.parametrize("algorithm", ["ed25519", "ecdsa-p256"])
def test_a_signature_round_trips_and_verifies(tmp_path: Path, algorithm: str) -> None:
    private, public = make_key(tmp_path / "keys", "k", algorithm)  # type: ignore[arg-type]
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    key = load_signing_key(private)
    signature = sign(MANIFEST, ["prod-llm", "beta"], key)
    data = encode_signatures([signature])
    [parsed] = parse_signatures(data, "file")
    assert parsed == signature
    assert parsed.names == ("beta", "prod-llm")
    assert parsed.artifact == MANIFEST.id and parsed.kind == "model"
    assert parsed.verifies(load_public_key(public))
    assert not parsed.verifies(generate("ed25519").public)  # another key


@pytest.mark.parametrize(
    "change",
    [
        {"artifact": "cd" * 32},
        {"kind": "dataset"},
        {"names": ("prod-llm", "stolen")},
        {"signed_at": 1},
    ],
)
def test_changing_any_claimed_field_breaks_the_signature(
    tmp_path: Path, change: dict[str, object]
) -> None:
    key = generate("ed25519")
    signature = sign(MANIFEST, ["prod-llm"], key)
    forged = Signature(**{**signature.__dict__, **change})  # type: ignore[arg-type]
    [parsed] = parse_signatures(encode_signatures([forged]), "file")
    assert not parsed.verifies(key.public)


def test_a_private_key_others_can_read_is_refused(tmp_path: Path) -> None:
    private, _ = make_key(tmp_path / "keys", "k")
    private.chmod(0o640)
    with pytest.raises(StorageError, match="signing key"):
        load_signing_key(private)


def test_a_key_file_that_is_not_a_key_is_named(tmp_path: Path) -> None:
    directory = tmp_path / "keys"
    make_key(directory, "k")
    (directory / "k").write_bytes(b"-----BEGIN PRIVATE KEY-----\nnonsense\n")
    with pytest.raises(InvalidInput, match=r"signing key .*/k: not an unencrypted PEM"):
        load_signing_key(directory / "k")


def _document(key_hex: str = "00" * 32, **fields: object) -> dict[str, object]:
    base: dict[str, object] = {
        "algorithm": "ed25519",
        "artifact": "ab" * 32,
        "format": 1,
        "key": f"sha256:{key_hex}",
        "kind": "model",
        "names": [],
        "signature": base64.b64encode(b"x" * 64).decode(),
        "signed_at": 1,
    }
    return base | fields


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"format": 2}, "unsupported format"),
        ({"artifact": "AB" * 32}, "artifact"),
        ({"key": "md5:00"}, "key"),
        ({"algorithm": "rsa"}, "algorithm"),
        ({"names": ["../x"]}, "alias"),
        ({"names": ["b", "a"]}, "sorted"),
        ({"signed_at": 1.5}, "signed_at"),
        ({"signature": "***"}, "base64"),
        ({"extra": 1}, "unknown key"),
    ],
)
def test_a_bad_field_is_named(fields: dict[str, object], named: str) -> None:
    data = json.dumps([_document(**fields)], sort_keys=True, separators=(",", ":")).encode()
    with pytest.raises(InvalidInput, match=f"sigs: signature 0: .*{named}"):
        parse_signatures(data, "sigs")


def test_oversized_and_non_canonical_files_are_refused() -> None:
    with pytest.raises(InvalidInput, match="larger than"):
        parse_signatures(b" " * (MAX_FILE_BYTES + 1), "sigs")
    data = json.dumps([_document()], sort_keys=True).encode()  # with spaces
    with pytest.raises(InvalidInput, match="canonical"):
        parse_signatures(data, "sigs")
    two = [_document(), _document()]
    with pytest.raises(InvalidInput, match=r"two signatures by one key|canonical"):
        parse_signatures(json.dumps(two, separators=(",", ":")).encode(), "sigs")


@pytest.mark.fuzz
@given(st.binary(max_size=4096))
def test_any_bytes_parse_or_are_refused_by_name(data: bytes) -> None:
    try:
        parse_signatures(data, "sigs")
    except InvalidInput as exc:
        assert str(exc).startswith("sigs")


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=20,
)


@pytest.mark.fuzz
@given(st.dictionaries(st.sampled_from(sorted(_document())), _json, max_size=8))
def test_any_document_fields_parse_or_are_refused_by_name(fields: dict[str, object]) -> None:
    data = json.dumps([_document(**fields)], sort_keys=True, separators=(",", ":")).encode()
    try:
        parse_signatures(data, "sigs")
    except InvalidInput as exc:
        assert str(exc).startswith("sigs")
