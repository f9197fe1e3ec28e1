"""Confidential artifacts: pieces encrypted at rest, opened only with the key, against both
backends; tampering, swapping, replaying and rotation; the key sources and the CLI."""

import base64
import dataclasses
import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shipyard.errors import (
    IntegrityError,
    InvalidInput,
    KeyUnavailable,
    ShipyardError,
    StorageError,
)
from shipyard.hashing import canonical_json, sha256_hex
from shipyard.store import LocalBackend, Manifest, PieceStore, materialize, put_tree, verify
from shipyard.store.manifest import FileEntry, PieceRef
from shipyard.store.pieces import piece_key
from shipyard.store.sealed import (
    KEY_ENV,
    KEY_FILE_ENV,
    MAX_KEY_FILE,
    Keyring,
    Sealer,
    key_id,
    load_keyring,
)

PIECE = 64 << 10
MARKER = b"PLAINTEXT-MARKER-7d1f"
Cli = Callable[..., subprocess.CompletedProcess[str]]


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def ring(*keys: bytes) -> Keyring:
    return Keyring(keys, "test keys")


@pytest.fixture
def secret_dir(tmp_path: Path) -> Path:
    """Files whose plaintext must never reach the store: every piece carries `MARKER`."""
    root = tmp_path / "secret"
    (root / "sub").mkdir(parents=True)
    (root / "weights.bin").write_bytes(MARKER * (200_000 // len(MARKER)))
    (root / "sub" / "other.bin").write_bytes(MARKER * (130_000 // len(MARKER)))
    (root / "config.json").write_bytes(b'{"note": "' + MARKER + b'"}')
    (root / "empty").write_bytes(b"")
    os.chmod(root / "config.json", 0o600)
    return root


def stored_pieces(pieces: PieceStore) -> list[bytes]:
    return [pieces.backend.get(info.key) for info in pieces.backend.list("pieces/")]


def test_round_trip_stores_only_ciphertext(
    pieces: PieceStore, secret_dir: Path, tmp_path: Path
) -> None:
    key = os.urandom(32)
    manifest = put_tree(pieces, secret_dir, "model", piece_size=PIECE, encrypt_with=ring(key))
    assert manifest.encryption is not None
    assert manifest.encryption.key_id == key_id(key)
    raw = pieces.backend.get(f"manifests/{manifest.id}")
    assert key not in raw and base64.b64encode(key) not in raw  # a key id, never the key
    stored = stored_pieces(pieces)
    assert len(stored) == sum(len(f.pieces) for f in manifest.files)
    assert not any(MARKER in data for data in stored)
    # Without the key, every piece still verifies by hash.
    assert verify(pieces, pieces.get_manifest(manifest.id)) == []
    dest = tmp_path / "out"
    materialize(pieces, pieces.get_manifest(manifest.id), dest, keys=ring(key))
    assert tree_bytes(dest) == tree_bytes(secret_dir)
    assert stat.S_IMODE((dest / "config.json").stat().st_mode) == 0o600


def test_a_confidential_get_writes_owner_only_files(pieces: PieceStore, tmp_path: Path) -> None:
    """Plaintext out of a confidential artifact is for its owner: group and other bits go."""
    src = tmp_path / "src"
    src.mkdir()
    for name, mode in (("run.sh", 0o755), ("shared.txt", 0o644), ("own.txt", 0o600)):
        (src / name).write_bytes(MARKER)
        os.chmod(src / name, mode)
    key = os.urandom(32)
    manifest = put_tree(pieces, src, "model", piece_size=PIECE, encrypt_with=ring(key))
    materialize(pieces, manifest, tmp_path / "out", keys=ring(key))
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "out").iterdir()}
    assert modes == {"run.sh": 0o700, "shared.txt": 0o600, "own.txt": 0o600}


def test_a_confidential_put_is_never_deduplicated(pieces: PieceStore, secret_dir: Path) -> None:
    """Fresh nonces and salt per put: equal plaintext never shows as equal ciphertext."""
    key = os.urandom(32)
    first = put_tree(pieces, secret_dir, "model", piece_size=PIECE, encrypt_with=ring(key))
    second = put_tree(pieces, secret_dir, "model", piece_size=PIECE, encrypt_with=ring(key))
    plain = put_tree(pieces, secret_dir, "model", piece_size=PIECE)
    hashes = [{r.hash for f in m.files for r in f.pieces} for m in (first, second, plain)]
    assert first.id != second.id
    assert not hashes[0] & hashes[1] and not hashes[0] & hashes[2]
    assert "encryption" not in plain.to_json()  # plain manifests are as they always were
    assert all("seals" not in f for f in plain.to_json()["files"])


@pytest.mark.parametrize("held", [(), (b"\x01" * 32,)], ids=["no key", "another key"])
def test_missing_or_wrong_key_is_refused_before_writing(
    pieces: PieceStore, secret_dir: Path, tmp_path: Path, held: tuple[bytes, ...]
) -> None:
    key = os.urandom(32)
    manifest = put_tree(pieces, secret_dir, "model", piece_size=PIECE, encrypt_with=ring(key))
    dest = tmp_path / "out"
    with pytest.raises(KeyUnavailable) as caught:
        materialize(pieces, manifest, dest, keys=ring(*held))
    assert manifest.id in str(caught.value) and key_id(key) in str(caught.value)
    assert not dest.exists()
    assert not list(tmp_path.glob(".out.partial-*"))


def test_keys_default_to_the_environment(
    secret_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pieces = PieceStore(LocalBackend(tmp_path / "store"))
    key = os.urandom(32)
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)
    monkeypatch.setenv(KEY_ENV, base64.b64encode(key).decode())
    manifest = put_tree(pieces, secret_dir, "model", piece_size=PIECE, encrypt_with=load_keyring())
    materialize(pieces, manifest, tmp_path / "out")
    assert tree_bytes(tmp_path / "out") == tree_bytes(secret_dir)
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(KeyUnavailable):
        materialize(pieces, manifest, tmp_path / "again")


def test_a_tampered_ciphertext_piece_is_named(
    pieces: PieceStore, secret_dir: Path, tmp_path: Path
) -> None:
    key = os.urandom(32)
    manifest = put_tree(pieces, secret_dir, "model", piece_size=PIECE, encrypt_with=ring(key))
    entry = next(f for f in manifest.files if f.path == "weights.bin")
    victim = entry.pieces[1]
    data = bytearray(pieces.backend.get(piece_key(victim.hash)))
    data[100] ^= 1
    pieces.backend.put(piece_key(victim.hash), bytes(data))
    (dest := tmp_path / "out").mkdir()
    with pytest.raises(IntegrityError, match=r"weights\.bin: piece 1 .*corrupt"):
        materialize(pieces, manifest, dest, keys=ring(key))
    assert list(dest.iterdir()) == []
    problems = verify(pieces, manifest)  # no key needed to find it
    assert [(p.path, p.piece_index, p.reason) for p in problems] == [("weights.bin", 1, "corrupt")]


@pytest.mark.parametrize(
    ("damage", "message"),
    [("truncate", r"has 999 bytes, the manifest says"), ("delete", r"is missing from")],
)
def test_a_truncated_or_missing_piece_is_named(
    pieces: PieceStore, secret_dir: Path, tmp_path: Path, damage: str, message: str
) -> None:
    key = os.urandom(32)
    manifest = put_tree(pieces, secret_dir, "model", piece_size=PIECE, encrypt_with=ring(key))
    victim = manifest.files[-1].pieces[0]
    if damage == "truncate":
        data = pieces.backend.get(piece_key(victim.hash))
        pieces.backend.put(piece_key(victim.hash), data[:999])
    else:
        pieces.backend.delete(piece_key(victim.hash))
    with pytest.raises(IntegrityError, match=r"weights\.bin: piece 0 .*" + message):
        materialize(pieces, manifest, tmp_path / "out", keys=ring(key))
    assert not (tmp_path / "out").exists()


def forge(manifest: Manifest, key: bytes, files: tuple[FileEntry, ...]) -> Manifest:
    """`manifest` with other files, its whole-manifest tag made again with the key: what an
    attacker could do only if that outer tag were broken. The pieces' own tags must still hold."""
    assert manifest.encryption is not None
    sealer = Sealer(key)
    sealer.header = manifest.encryption
    return sealer.seal_manifest(dataclasses.replace(manifest, files=files))


def test_pieces_swapped_between_files_fail(pieces: PieceStore, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.bin").write_bytes(b"A" * 1000)
    (src / "b.bin").write_bytes(b"B" * 1000)
    key = os.urandom(32)
    manifest = put_tree(pieces, src, "model", piece_size=PIECE, encrypt_with=ring(key))
    a, b = manifest.files
    swapped = (
        dataclasses.replace(a, pieces=b.pieces, seals=b.seals),
        dataclasses.replace(b, pieces=a.pieces, seals=a.seals),
    )
    # Without the key, the swap breaks the manifest's tag.
    plain_swap = dataclasses.replace(manifest, files=swapped)
    with pytest.raises(IntegrityError, match="manifest fails its tag"):
        materialize(pieces, plain_swap, tmp_path / "out1", keys=ring(key))
    # Even with that tag made again, each piece's associated data names its file.
    with pytest.raises(IntegrityError, match=r"a\.bin: piece 0 .*does not decrypt"):
        materialize(pieces, forge(manifest, key, swapped), tmp_path / "out2", keys=ring(key))
    # Reordered within one file: the index is in the associated data too.
    src2 = tmp_path / "src2"
    src2.mkdir()
    (src2 / "c.bin").write_bytes(os.urandom(2 * PIECE))
    two = put_tree(pieces, src2, "model", piece_size=PIECE, encrypt_with=ring(key))
    (c,) = two.files
    assert c.seals is not None
    p0, p1 = c.pieces
    reordered = dataclasses.replace(
        c,
        pieces=(dataclasses.replace(p1, offset=0), dataclasses.replace(p0, offset=PIECE)),
        seals=(c.seals[1], c.seals[0]),
    )
    with pytest.raises(IntegrityError, match=r"c\.bin: piece 0 .*does not decrypt"):
        materialize(pieces, forge(two, key, (reordered,)), tmp_path / "out3", keys=ring(key))
    assert not any(p.name.startswith("out") for p in tmp_path.iterdir())


def test_a_piece_replayed_from_another_artifact_fails(pieces: PieceStore, tmp_path: Path) -> None:
    key = os.urandom(32)
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "f.bin").write_bytes(name.encode() * 500)
    one = put_tree(pieces, tmp_path / "one", "model", piece_size=PIECE, encrypt_with=ring(key))
    two = put_tree(pieces, tmp_path / "two", "model", piece_size=PIECE, encrypt_with=ring(key))
    replayed = forge(two, key, one.files)  # same path, size and place; another artifact's salt
    with pytest.raises(IntegrityError, match=r"f\.bin: piece 0 .*does not decrypt"):
        materialize(pieces, replayed, tmp_path / "out", keys=ring(key))


def test_rotation_keeps_old_artifacts_readable(
    pieces: PieceStore, secret_dir: Path, tmp_path: Path
) -> None:
    old, new = os.urandom(32), os.urandom(32)
    before = put_tree(pieces, secret_dir, "model", piece_size=PIECE, encrypt_with=ring(old))
    rotated = ring(new, old)
    after = put_tree(pieces, secret_dir, "model", piece_size=PIECE, encrypt_with=rotated)
    assert after.encryption is not None and after.encryption.key_id == key_id(new)
    materialize(pieces, before, tmp_path / "before", keys=rotated)
    materialize(pieces, after, tmp_path / "after", keys=rotated)
    assert tree_bytes(tmp_path / "before") == tree_bytes(tmp_path / "after")
    with pytest.raises(KeyUnavailable, match=key_id(old)):
        materialize(pieces, before, tmp_path / "retired", keys=ring(new))


def test_a_confidential_put_without_a_key_stores_nothing(
    pieces: PieceStore, secret_dir: Path
) -> None:
    with pytest.raises(KeyUnavailable, match="needs a key"):
        put_tree(pieces, secret_dir, "model", piece_size=PIECE, encrypt_with=ring())
    assert stored_pieces(pieces) == []


# Key sources


def key_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    directory = tmp_path / "keys"
    directory.mkdir(mode=0o700, exist_ok=True)
    path = directory / "k"
    path.write_text(text)
    os.chmod(path, mode)
    return path


def test_key_file_lists_keys_first_seals(tmp_path: Path) -> None:
    first, second = os.urandom(32), os.urandom(32)
    text = "# rotated today\n" + "\n".join(base64.b64encode(k).decode() for k in (first, second))
    path = key_file(tmp_path, text + "\n\n")
    keys = load_keyring(path, environ={})
    assert keys.keys == (first, second)
    assert keys.ids == [key_id(first), key_id(second)]


def test_key_file_wins_over_the_environment_and_env_lists_by_comma(tmp_path: Path) -> None:
    in_file, in_env, also = os.urandom(32), os.urandom(32), os.urandom(32)
    path = key_file(tmp_path, base64.b64encode(in_file).decode())
    env_value = ",".join(base64.b64encode(k).decode() for k in (in_env, also))
    assert load_keyring(environ={KEY_FILE_ENV: str(path), KEY_ENV: env_value}).keys == (in_file,)
    assert load_keyring(environ={KEY_ENV: env_value}).keys == (in_env, also)
    assert load_keyring(environ={}).keys == ()
    with pytest.raises(InvalidInput, match=f"{KEY_ENV}: key 2 is not base64"):
        load_keyring(environ={KEY_ENV: base64.b64encode(in_env).decode() + ",oops!"})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not base64!!", "line 1 is not base64"),
        ("# only a comment\n" + base64.b64encode(b"short").decode(), "line 2 decodes to 5 bytes"),
        ("\n# nothing\n", "holds no key"),
        ("caf\u00e9", "not ASCII"),
    ],
)
def test_bad_key_files_are_refused_by_line_without_echoing(
    tmp_path: Path, text: str, message: str
) -> None:
    path = key_file(tmp_path, text)
    with pytest.raises(InvalidInput, match=message) as caught:
        load_keyring(path, environ={})
    assert str(path) in str(caught.value)
    assert "short" not in str(caught.value) and "c2hvcnQ" not in str(caught.value)


def test_an_oversized_key_file_is_refused_not_cut_short(tmp_path: Path) -> None:
    line = base64.b64encode(os.urandom(32)).decode() + "\n"
    path = key_file(tmp_path, line * (MAX_KEY_FILE // len(line)) + "# " + "x" * 100)
    with pytest.raises(InvalidInput, match="larger than 65536 bytes"):
        load_keyring(path, environ={})


def test_key_file_with_group_access_is_refused(tmp_path: Path) -> None:
    path = key_file(tmp_path, base64.b64encode(os.urandom(32)).decode(), mode=0o640)
    with pytest.raises(StorageError, match=r"encryption key file .*group/other"):
        load_keyring(path, environ={})


# The CLI


def test_cli_confidential_put_get_verify(
    cli: Cli, secret_dir: Path, tmp_path: Path, shipyard_home: Path
) -> None:
    keys = tmp_path / "keys" / "k"
    made = cli("artifact", "keygen", str(keys))
    assert made.returncode == 0, made.stderr
    assert stat.S_IMODE(keys.stat().st_mode) == 0o600
    key_hex = made.stdout.strip()

    refused = cli("artifact", "put", str(secret_dir), "--kind", "model", "--confidential")
    assert refused.returncode == KeyUnavailable.exit_code
    assert refused.stderr.count("\n") == 1 and "needs a key" in refused.stderr

    put = cli(
        "artifact", "put", str(secret_dir), "--kind", "model", "--name", "secret",
        "--confidential", "--key-file", str(keys),
    )  # fmt: skip
    assert put.returncode == 0, put.stderr
    artifact = put.stdout.strip()
    manifest = json.loads((shipyard_home / "store" / "manifests" / artifact).read_bytes())
    assert manifest["encryption"]["key_id"] == key_hex

    show = cli("artifact", "show", "secret")
    assert f"AES-256-GCM, key {key_hex}" in show.stdout

    no_key = cli("artifact", "get", "secret", str(tmp_path / "out"))
    assert no_key.returncode == KeyUnavailable.exit_code
    assert no_key.stderr.count("\n") == 1
    assert artifact in no_key.stderr and key_hex in no_key.stderr
    assert not (tmp_path / "out").exists()

    assert cli("artifact", "verify", "secret").returncode == 0  # hashes need no key

    got = cli("artifact", "get", "secret", str(tmp_path / "out"), "--key-file", str(keys))
    assert got.returncode == 0, got.stderr
    assert tree_bytes(tmp_path / "out") == tree_bytes(secret_dir)

    # Rotate: a new key seals from now on, the old one still opens.
    rotated = cli("artifact", "keygen", str(keys))
    assert rotated.returncode == 0 and rotated.stdout.strip() != key_hex
    again = cli("artifact", "get", "secret", str(tmp_path / "again"), "--key-file", str(keys))
    assert again.returncode == 0, again.stderr


def test_cli_tampered_piece_exits_as_corruption(
    cli: Cli, secret_dir: Path, tmp_path: Path, shipyard_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, base64.b64encode(os.urandom(32)).decode())
    put = cli("artifact", "put", str(secret_dir), "--kind", "model", "--confidential")
    assert put.returncode == 0, put.stderr
    store = PieceStore(LocalBackend(shipyard_home / "store"))
    manifest = store.get_manifest(put.stdout.strip())
    ref = manifest.files[-1].pieces[0]
    assert isinstance(store.backend, LocalBackend)
    path = store.backend.path(piece_key(ref.hash))
    data = bytearray(path.read_bytes())
    data[0] ^= 0xFF
    path.write_bytes(bytes(data))
    got = cli("artifact", "get", put.stdout.strip(), str(tmp_path / "out"))
    assert got.returncode == IntegrityError.exit_code
    assert got.stderr.count("\n") == 1 and "weights.bin: piece 0" in got.stderr
    assert not (tmp_path / "out").exists()
    assert cli("artifact", "verify", put.stdout.strip()).returncode == IntegrityError.exit_code


# Fuzz: the encryption fields of a manifest that arrives from a peer or a shared bucket

_FUZZ_KEY = bytes(range(32))
_HEXISH = st.text("0123456789abcdefABCDEF ", max_size=40)
_HOSTILE = (
    _HEXISH
    | st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.lists(_HEXISH, max_size=3)
    | st.dictionaries(
        st.sampled_from(["algorithm", "key_id", "salt", "nonce", "tag", "x"]), _HEXISH
    )
)


def _sealed_manifest() -> Manifest:
    sealer = Sealer(_FUZZ_KEY)
    entries = []
    for path, blob in (("a.bin", b"a" * 100), ("b/c.bin", b"c" * 30)):
        refs, seals = [], []
        for index, offset in enumerate(range(0, len(blob), 64)):
            chunk = memoryview(blob[offset : offset + 64])
            with sealer.seal_piece(
                chunk, path=path, index=index, offset=offset, file_size=len(blob)
            ) as (ciphertext, seal):
                refs.append(PieceRef(sha256_hex(ciphertext), offset, len(chunk)))
                seals.append(seal)
        entries.append(FileEntry(path, len(blob), 0o644, tuple(refs), tuple(seals)))
    plain = Manifest("model", 64, tuple(entries), encryption=sealer.header)
    return sealer.seal_manifest(plain)


_SEALED = _sealed_manifest()


@st.composite
def _mutated(draw: st.DrawFn) -> dict[str, Any]:
    raw: dict[str, Any] = _SEALED.to_json()
    where = draw(st.sampled_from(["header", "header-drop", "seal", "seals", "file-seals", "add"]))
    value = draw(_HOSTILE)
    if where == "header":
        raw["encryption"][draw(st.sampled_from(sorted(raw["encryption"])))] = value
    elif where == "header-drop":
        del raw["encryption"][draw(st.sampled_from(sorted(raw["encryption"])))]
    elif where == "seal":
        seals = raw["files"][draw(st.integers(0, 1))]["seals"]
        seal = seals[draw(st.integers(0, len(seals) - 1))]
        seal[draw(st.integers(0, 1))] = value
    elif where == "seals":
        raw["files"][draw(st.integers(0, 1))]["seals"] = value
    elif where == "file-seals":
        del raw["files"][draw(st.integers(0, 1))]["seals"]
    else:
        raw[draw(st.sampled_from(["encryption", "seals"]))] = value
    return raw


@pytest.mark.fuzz
@given(_mutated())
@settings(max_examples=300, deadline=None)
def test_fuzz_encryption_fields(raw: dict[str, Any]) -> None:
    """Only Shipyard's errors escape the parser; whatever it accepts is canonical, and a changed
    manifest that parses never opens under the key."""
    data = canonical_json(raw)
    try:
        manifest = Manifest.from_bytes(data)
    except ShipyardError:
        return
    assert manifest.canonical_bytes() == data
    if manifest == _SEALED:
        return
    with pytest.raises((IntegrityError, KeyUnavailable, InvalidInput)):
        ring(_FUZZ_KEY).opener(manifest)


def test_the_fuzzed_manifest_opens_unchanged() -> None:
    """The fuzz's starting point is sound: it parses and opens."""
    assert Manifest.from_bytes(_SEALED.canonical_bytes()) == _SEALED
    ring(_FUZZ_KEY).opener(_SEALED)


def test_the_benchmark_round_trips_both_ways() -> None:
    """A small run of benchmarks/store_encryption.py: its figures are there and every file came
    back whole, whatever the speed."""
    script = Path(__file__).parents[2] / "benchmarks" / "store_encryption.py"
    args = ["--size-mib", "4", "--piece-size-mib", "1", "--repeat", "2", "--no-fsync"]
    done = subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout.splitlines()[-1])
    assert figures["identical"] is True
    assert figures["ratio"] > 0 and figures["get_ratio"] > 0
