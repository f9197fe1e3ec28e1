"""Manifests: the canonical JSON description of an artifact, and its content address.

The artifact id is the SHA-256 of the canonical bytes (sorted keys, no whitespace, UTF-8), so the
same files, kind, metadata and run always give the same id. Manifests arrive from other teams,
peers and shared buckets, so parsing trusts nothing: every field is type- and range-checked, and
the bytes must be exactly the canonical encoding of what they parse to, so one artifact has one id.
Paths are relative POSIX paths checked here, once, for every manifest that is built or parsed.

A confidential artifact's manifest also has an `encryption` header and, per file, the nonce and
GCM tag of each piece (`seals`); both keys are absent otherwise, so a plain artifact's bytes and id
are what they always were, and a reader that predates them refuses an encrypted manifest by name
instead of writing ciphertext. The cryptography itself is in `sealed`.
"""

import json
import math
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from shipyard.errors import InvalidInput
from shipyard.hashing import canonical_json, sha256_hex

FORMAT_VERSION = 1
HASH_HEX_LEN = 64
MAX_MODE = 0o777  # permission bits only: no setuid, setgid or sticky bit
MAX_PIECE_SIZE = 1 << 30  # far above what put writes (64 MiB), far below what breaks a reader
MAX_FILE_SIZE = 1 << 50  # 1 PiB
MAX_NAME_BYTES = 255  # one path component, as Linux filesystems allow
MAX_PATH_BYTES = 4096
MAX_TEXT = 200  # kind and run
MAX_METADATA_DEPTH = 32
ALGORITHM = "AES-256-GCM"
KEY_ID_HEX_LEN = 16
SALT_HEX_LEN = 32
NONCE_HEX_LEN = 24  # 96 bits, GCM's own nonce size
TAG_HEX_LEN = 32

_HEX = frozenset("0123456789abcdef")
_TOP_KEYS = frozenset({"files", "format", "kind", "metadata", "piece_size", "run"})
_FILE_KEYS = frozenset({"mode", "path", "pieces", "size"})
_ENCRYPTION_KEYS = frozenset({"algorithm", "key_id", "nonce", "salt", "tag"})


@dataclass(frozen=True)
class PieceRef:
    """One run of bytes of a file: where it sits in the file and the SHA-256 of its bytes."""

    hash: str
    offset: int
    size: int


@dataclass(frozen=True)
class PieceSeal:
    """How one piece of a confidential artifact was encrypted: its GCM nonce and tag (hex). The
    stored piece is the ciphertext alone, as long as the plaintext."""

    nonce: str
    tag: str


@dataclass(frozen=True)
class FileEntry:
    """One file of an artifact, as the ordered pieces that make it up (and, when the artifact is
    confidential, one seal per piece)."""

    path: str
    size: int
    mode: int
    pieces: tuple[PieceRef, ...]
    seals: tuple[PieceSeal, ...] | None = None


@dataclass(frozen=True)
class Encryption:
    """A confidential artifact's header: the algorithm, the id (fingerprint) of its key, a random
    salt every piece's associated data carries, and the nonce and tag that authenticate the whole
    manifest under the key."""

    key_id: str
    salt: str
    nonce: str
    tag: str
    algorithm: str = ALGORITHM

    def to_json(self) -> dict[str, str]:
        return {
            "algorithm": self.algorithm,
            "key_id": self.key_id,
            "salt": self.salt,
            "nonce": self.nonce,
            "tag": self.tag,
        }


@dataclass(frozen=True)
class Manifest:
    """Everything needed to rebuild and verify an artifact's files."""

    kind: str
    piece_size: int
    files: tuple[FileEntry, ...]
    metadata: dict[str, Any] = field(default_factory=dict)
    run: str | None = None
    format: int = FORMAT_VERSION
    encryption: Encryption | None = None

    def __post_init__(self) -> None:
        validate(self)

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def to_json(self) -> dict[str, Any]:
        raw: dict[str, Any] = {
            "format": self.format,
            "kind": self.kind,
            "piece_size": self.piece_size,
            "files": [_file_to_json(f) for f in self.files],
            "metadata": self.metadata,
            "run": self.run,
        }
        if self.encryption is not None:
            raw["encryption"] = self.encryption.to_json()
        return raw

    def canonical_bytes(self) -> bytes:
        return canonical_json(self.to_json())

    @property
    def id(self) -> str:
        return sha256_hex(self.canonical_bytes())

    @classmethod
    def from_bytes(cls, data: bytes, where: str = "manifest") -> "Manifest":
        """Parse manifest bytes; `InvalidInput` naming `where` and the field for anything else."""
        try:
            raw = json.loads(data)
        except RecursionError:
            raise InvalidInput(f"{where}: malformed JSON (nested too deeply)") from None
        except (ValueError, TypeError) as exc:  # bad JSON, bad UTF-8, an int of 4300+ digits
            raise InvalidInput(f"{where}: malformed JSON ({exc})") from None
        try:
            manifest = _from_json(raw)
        except InvalidInput as exc:
            raise InvalidInput(f"{where}: {exc}") from None
        if manifest.canonical_bytes() != data:
            raise InvalidInput(
                f"{where}: bytes are not the canonical encoding (sorted keys, no whitespace, "
                f"UTF-8, no escapes it does not need); re-encoded, its id would be {manifest.id}"
            )
        return manifest


def _file_to_json(entry: FileEntry) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "path": entry.path,
        "size": entry.size,
        "mode": entry.mode,
        "pieces": [[p.hash, p.offset, p.size] for p in entry.pieces],
    }
    if entry.seals is not None:
        raw["seals"] = [[s.nonce, s.tag] for s in entry.seals]
    return raw


def _from_json(raw: Any) -> Manifest:
    """Build a manifest from parsed JSON, checking each field's JSON type on the way."""
    if not isinstance(raw, dict):
        raise InvalidInput(f"top level is {_json_type(raw)}, not an object")
    fmt = raw.get("format")
    if type(fmt) is not int or fmt != FORMAT_VERSION:
        raise InvalidInput(
            f"unsupported format {_show(fmt)} (this Shipyard reads {FORMAT_VERSION})"
        )
    _check_keys(raw, _TOP_KEYS, "manifest", optional=frozenset({"encryption"}))
    files = _typed(raw["files"], list, "files")
    return Manifest(
        kind=_typed(raw["kind"], str, "kind"),
        piece_size=_integer(raw["piece_size"], "piece_size"),
        files=tuple(_file_from_json(f, f"files[{i}]") for i, f in enumerate(files)),
        metadata=_typed(raw["metadata"], dict, "metadata"),
        run=None if raw["run"] is None else _typed(raw["run"], str, "run"),
        encryption=_encryption_from_json(raw["encryption"]) if "encryption" in raw else None,
    )


def _encryption_from_json(raw: Any) -> Encryption:
    _check_keys(_typed(raw, dict, "encryption"), _ENCRYPTION_KEYS, "encryption")
    fields = {key: _typed(raw[key], str, f"encryption.{key}") for key in _ENCRYPTION_KEYS}
    return Encryption(**fields)


def _file_from_json(raw: Any, where: str) -> FileEntry:
    _check_keys(_typed(raw, dict, where), _FILE_KEYS, where, optional=frozenset({"seals"}))
    pieces = []
    for i, piece in enumerate(_typed(raw["pieces"], list, f"{where}.pieces")):
        at = f"{where}.pieces[{i}]"
        if not isinstance(piece, list) or len(piece) != 3:
            raise InvalidInput(f"{at}: must be [sha256, offset, size]")
        digest, offset, size = piece
        pieces.append(PieceRef(_typed(digest, str, at), _integer(offset, at), _integer(size, at)))
    seals = None
    if "seals" in raw:
        seals = []
        for i, seal in enumerate(_typed(raw["seals"], list, f"{where}.seals")):
            at = f"{where}.seals[{i}]"
            if not isinstance(seal, list) or len(seal) != 2:
                raise InvalidInput(f"{at}: must be [nonce, tag]")
            seals.append(PieceSeal(_typed(seal[0], str, at), _typed(seal[1], str, at)))
    return FileEntry(
        path=_typed(raw["path"], str, f"{where}.path"),
        size=_integer(raw["size"], f"{where}.size"),
        mode=_integer(raw["mode"], f"{where}.mode"),
        pieces=tuple(pieces),
        seals=None if seals is None else tuple(seals),
    )


def _check_keys(
    raw: dict[str, Any],
    expected: frozenset[str],
    where: str,
    optional: frozenset[str] = frozenset(),
) -> None:
    if unknown := sorted(set(raw) - expected - optional):
        raise InvalidInput(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}")
    if missing := sorted(expected - set(raw)):
        raise InvalidInput(f"{where}: missing key(s) {', '.join(map(repr, missing))}")


def _typed(value: Any, kind: type, where: str) -> Any:
    if not isinstance(value, kind):
        raise InvalidInput(
            f"{where}: {_show(value)} is {_json_type(value)}, not {_json_name(kind)}"
        )
    return value


def _integer(value: Any, where: str) -> int:
    # bool is an int to Python but not to JSON; floats (1.0, Infinity) are refused too.
    if type(value) is not int:
        raise InvalidInput(f"{where}: {_show(value)} is {_json_type(value)}, not an integer")
    return value


def _json_name(kind: type) -> str:
    return {str: "a string", int: "an integer", list: "an array", dict: "an object"}[kind]


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, float):
        return "a number with a fraction or exponent"
    return _json_name(type(value)) if type(value) in (str, int, list, dict) else "unknown"


def _show(value: Any) -> str:
    """A value for a message, cut short: a hostile manifest may hold a megabyte in one field."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def validate_relative_path(path: str) -> None:
    """Refuse a path that could land outside the destination directory or cannot be created."""
    if not path or "\\" in path or "\x00" in path:
        raise InvalidInput(f"path {_show(path)} is empty or contains a backslash or NUL")
    try:
        encoded = path.encode()
    except UnicodeEncodeError:
        raise InvalidInput(f"path {_show(path)} is not valid UTF-8") from None
    if PurePosixPath(path).is_absolute():
        raise InvalidInput(f"path {_show(path)} is absolute")
    components = encoded.split(b"/")
    if any(part in (b"..", b".", b"") for part in components):
        raise InvalidInput(f"path {_show(path)} has an empty, '.' or '..' component")
    if len(encoded) > MAX_PATH_BYTES or max(map(len, components)) > MAX_NAME_BYTES:
        raise InvalidInput(
            f"path {_show(path)} is too long: at most {MAX_NAME_BYTES} bytes per component "
            f"and {MAX_PATH_BYTES} in all"
        )


def validate(manifest: Manifest) -> None:
    """Check every field's range, paths, piece layout and hashes; raise `InvalidInput` naming
    the field (and the file, for a file's fields)."""
    kind = manifest.kind
    if not 0 < len(kind) <= MAX_TEXT or not kind.replace("-", "").replace("_", "").isalnum():
        raise InvalidInput(f"kind {_show(kind)} must be 1-{MAX_TEXT} letters, digits, '-' or '_'")
    if not kind.isascii():
        raise InvalidInput(f"kind {_show(kind)} must be ASCII")
    _check_range("piece_size", manifest.piece_size, 1, MAX_PIECE_SIZE)
    if manifest.run is not None and not (0 < len(manifest.run) <= MAX_TEXT and _utf8(manifest.run)):
        raise InvalidInput(f"run {_show(manifest.run)} must be 1-{MAX_TEXT} characters of UTF-8")
    _check_metadata(manifest.metadata, "metadata", 0)
    _validate_encryption(manifest)
    previous = None
    for entry in manifest.files:
        validate_relative_path(entry.path)
        if previous is not None and entry.path <= previous:
            raise InvalidInput(
                f"files: {entry.path!r} follows {previous!r}; paths must be sorted and unique"
            )
        previous = entry.path
        _validate_file(entry, manifest.piece_size)
    # A file may not also be a directory of another file ("a" and "a/b").
    paths = {entry.path for entry in manifest.files}
    for path in paths:
        for parent in PurePosixPath(path).parents:
            if str(parent) in paths:
                raise InvalidInput(f"path {path!r} lies under file {str(parent)!r}")


def _validate_file(entry: FileEntry, piece_size: int) -> None:
    where = f"file {entry.path!r}"
    _check_range(f"{where}: mode", entry.mode, 0, MAX_MODE, octal=True)
    _check_range(f"{where}: size", entry.size, 0, MAX_FILE_SIZE)
    offset = 0
    for index, piece in enumerate(entry.pieces):
        at = f"{where}: piece {index}"
        if len(piece.hash) != HASH_HEX_LEN or not set(piece.hash) <= _HEX:
            raise InvalidInput(f"{at}: hash {_show(piece.hash)} is not lowercase SHA-256 hex")
        _check_range(f"{at}: size", piece.size, 1, piece_size)
        if piece.offset != offset:
            raise InvalidInput(
                f"{at}: offset {_show(piece.offset)} is not {offset}; pieces must be contiguous"
            )
        offset += piece.size
    if offset != entry.size:
        raise InvalidInput(f"{where}: pieces cover {offset} bytes, file has {entry.size}")


def _validate_encryption(manifest: Manifest) -> None:
    """A confidential manifest has a well-formed header and one seal per piece, every nonce in it
    once; a plain one has no seals at all."""
    header = manifest.encryption
    if header is None:
        for entry in manifest.files:
            if entry.seals is not None:
                raise InvalidInput(f"file {entry.path!r}: seals in an artifact without encryption")
        return
    if header.algorithm != ALGORITHM:
        raise InvalidInput(
            f"encryption.algorithm {_show(header.algorithm)} is not supported (only {ALGORITHM})"
        )
    _check_hex("encryption.key_id", header.key_id, KEY_ID_HEX_LEN)
    _check_hex("encryption.salt", header.salt, SALT_HEX_LEN)
    _check_hex("encryption.nonce", header.nonce, NONCE_HEX_LEN)
    _check_hex("encryption.tag", header.tag, TAG_HEX_LEN)
    nonces = {header.nonce}
    for entry in manifest.files:
        where = f"file {entry.path!r}"
        if entry.seals is None or len(entry.seals) != len(entry.pieces):
            count = "no" if entry.seals is None else len(entry.seals)
            raise InvalidInput(f"{where}: {count} seals for {len(entry.pieces)} pieces")
        for index, seal in enumerate(entry.seals):
            _check_hex(f"{where}: seal {index} nonce", seal.nonce, NONCE_HEX_LEN)
            _check_hex(f"{where}: seal {index} tag", seal.tag, TAG_HEX_LEN)
            # GCM under one key with a repeated nonce leaks the XOR of two plaintexts.
            if seal.nonce in nonces:
                raise InvalidInput(f"{where}: seal {index} repeats nonce {seal.nonce}")
            nonces.add(seal.nonce)


def _check_hex(what: str, value: str, length: int) -> None:
    if len(value) != length or not set(value) <= _HEX:
        raise InvalidInput(f"{what} {_show(value)} is not {length} lowercase hex digits")


def _check_range(what: str, value: int, low: int, high: int, octal: bool = False) -> None:
    if not low <= value <= high:
        shown, bounds = (
            (oct(value), f"{low}..{oct(high)}") if octal else (_show(value), f"{low}..{high}")
        )
        raise InvalidInput(f"{what} {shown} is outside {bounds}")


def _check_metadata(value: Any, where: str, depth: int) -> None:
    """Metadata is free JSON, but finite, UTF-8 and at most `MAX_METADATA_DEPTH` levels deep."""
    if depth > MAX_METADATA_DEPTH:
        raise InvalidInput(f"{where}: nested deeper than {MAX_METADATA_DEPTH} levels")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str) or not _utf8(key):
                raise InvalidInput(f"{where}: key {_show(key)} is not a UTF-8 string")
            _check_metadata(item, f"{where}.{key}", depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_metadata(item, f"{where}[{index}]", depth + 1)
    elif isinstance(value, float) and not math.isfinite(value):
        raise InvalidInput(f"{where}: {value} is not a finite number")
    elif isinstance(value, str) and not _utf8(value):
        raise InvalidInput(f"{where}: {_show(value)} is not valid UTF-8")
    elif value is not None and not isinstance(value, int | float | str):
        raise InvalidInput(f"{where}: {type(value).__name__} is not a JSON value")


def _utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True
