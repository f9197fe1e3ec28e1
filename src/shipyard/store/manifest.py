"""Manifests: the canonical JSON description of an artifact, and its content address.

The artifact id is the SHA-256 of the canonical bytes (sorted keys, no whitespace, UTF-8), so the
same files, kind, metadata and run always give the same id. Paths are relative POSIX paths checked
here, once, for every manifest that is built or parsed: none may escape the destination.
"""

import json
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from shipyard.errors import InvalidInput
from shipyard.hashing import canonical_json, sha256_hex

FORMAT_VERSION = 1
HASH_HEX_LEN = 64


@dataclass(frozen=True)
class PieceRef:
    """One run of bytes of a file: where it sits in the file and the SHA-256 of its bytes."""

    hash: str
    offset: int
    size: int


@dataclass(frozen=True)
class FileEntry:
    """One file of an artifact, as the ordered pieces that make it up."""

    path: str
    size: int
    mode: int
    pieces: tuple[PieceRef, ...]


@dataclass(frozen=True)
class Manifest:
    """Everything needed to rebuild and verify an artifact's files."""

    kind: str
    piece_size: int
    files: tuple[FileEntry, ...]
    metadata: dict[str, Any] = field(default_factory=dict)
    run: str | None = None
    format: int = FORMAT_VERSION

    def __post_init__(self) -> None:
        validate(self)

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "kind": self.kind,
            "piece_size": self.piece_size,
            "files": [
                {
                    "path": f.path,
                    "size": f.size,
                    "mode": f.mode,
                    "pieces": [[p.hash, p.offset, p.size] for p in f.pieces],
                }
                for f in self.files
            ],
            "metadata": self.metadata,
            "run": self.run,
        }

    def canonical_bytes(self) -> bytes:
        return canonical_json(self.to_json())

    @property
    def id(self) -> str:
        return sha256_hex(self.canonical_bytes())

    @classmethod
    def from_bytes(cls, data: bytes, where: str = "manifest") -> "Manifest":
        try:
            raw = json.loads(data)
            if raw.get("format") != FORMAT_VERSION:
                raise InvalidInput(f"{where}: unsupported format {raw.get('format')!r}")
            files = tuple(
                FileEntry(
                    path=f["path"],
                    size=int(f["size"]),
                    mode=int(f["mode"]),
                    pieces=tuple(PieceRef(h, int(o), int(s)) for h, o, s in f["pieces"]),
                )
                for f in raw["files"]
            )
            return cls(
                kind=raw["kind"],
                piece_size=int(raw["piece_size"]),
                files=files,
                metadata=raw.get("metadata") or {},
                run=raw.get("run"),
            )
        except InvalidInput as exc:
            raise InvalidInput(f"{where}: {exc}") from None
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InvalidInput(f"{where}: malformed manifest ({exc!r})") from None


def validate_relative_path(path: str) -> None:
    """Refuse a path that could land outside the destination directory."""
    if not path or "\\" in path or "\x00" in path:
        raise InvalidInput(f"path {path!r} is empty or contains a backslash or NUL")
    pure = PurePosixPath(path)
    if pure.is_absolute():
        raise InvalidInput(f"path {path!r} is absolute")
    if any(part in ("..", ".", "") for part in path.split("/")):
        raise InvalidInput(f"path {path!r} has an empty, '.' or '..' component")


def validate(manifest: Manifest) -> None:
    """Check paths, piece layout and hashes; raise `InvalidInput` naming the offending file."""
    if not manifest.kind or not manifest.kind.replace("-", "").replace("_", "").isalnum():
        raise InvalidInput(f"kind {manifest.kind!r} must be letters, digits, '-' or '_'")
    if manifest.piece_size <= 0:
        raise InvalidInput(f"piece_size {manifest.piece_size} must be positive")
    seen: set[str] = set()
    for entry in manifest.files:
        validate_relative_path(entry.path)
        if entry.path in seen:
            raise InvalidInput(f"path {entry.path!r} appears twice")
        seen.add(entry.path)
        offset = 0
        for piece in entry.pieces:
            if len(piece.hash) != HASH_HEX_LEN or not all(
                c in "0123456789abcdef" for c in piece.hash
            ):
                raise InvalidInput(f"{entry.path}: piece hash {piece.hash!r} is not SHA-256 hex")
            if piece.offset != offset or piece.size <= 0:
                raise InvalidInput(f"{entry.path}: pieces are not contiguous at offset {offset}")
            offset += piece.size
        if offset != entry.size:
            raise InvalidInput(f"{entry.path}: pieces cover {offset} bytes, file has {entry.size}")
    # A file may not also be a directory of another file ("a" and "a/b").
    for path in seen:
        for parent in PurePosixPath(path).parents:
            if str(parent) in seen:
                raise InvalidInput(f"path {path!r} lies under file {str(parent)!r}")
