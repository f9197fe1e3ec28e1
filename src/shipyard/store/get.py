"""Materialize an artifact into a directory and verify stored artifacts.

Files are rebuilt in a hidden staging directory beside DEST and moved into place only after every
piece has been verified, so a failed get leaves DEST exactly as it was.
"""

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from shipyard.errors import IntegrityError, InvalidInput, NotFound, StorageError
from shipyard.hashing import sha256_hex
from shipyard.store.local import why
from shipyard.store.manifest import FileEntry, Manifest, PieceRef
from shipyard.store.modes import written_mode
from shipyard.store.pieces import PieceStore, piece_key
from shipyard.store.pipeline import fetch_in_order
from shipyard.store.sealed import OWNER_ONLY, Keyring, Opener, open_sealed

Progress = Callable[[int], None]


@dataclass(frozen=True)
class Problem:
    """One piece that failed verification."""

    path: str
    piece_index: int
    piece_hash: str
    reason: str  # "missing" or "corrupt"

    def __str__(self) -> str:
        return f"{self.path}: piece {self.piece_index} ({self.piece_hash[:16]}) is {self.reason}"


def materialize(
    pieces: PieceStore,
    manifest: Manifest,
    dest: Path,
    progress: Progress | None = None,
    keys: Keyring | None = None,
) -> None:
    """Write the artifact's files under `dest`, which must be absent or an empty directory. A
    confidential artifact is decrypted with `keys` (default: those the environment names); one
    whose key is missing is refused before anything is written."""
    opener = open_sealed(manifest, keys)
    with staged(dest) as staging:
        for entry in manifest.files:
            _write_file(pieces, entry, staging, progress, opener)


@contextmanager
def staged(dest: Path) -> Iterator[Path]:
    """A fresh hidden directory beside `dest` to build files in. When the block succeeds it
    replaces `dest` (which must be absent or an empty directory); when it fails it is removed and
    `dest` is left as it was. A destination that cannot be written raises `StorageError`."""
    dest = Path(dest)
    try:
        if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
            raise InvalidInput(f"destination {dest} exists and is not an empty directory")
        dest.parent.mkdir(parents=True, exist_ok=True)
        staging = dest.parent / f".{dest.name}.partial-{uuid.uuid4().hex[:12]}"
        staging.mkdir()
    except OSError as exc:
        raise StorageError(f"cannot write destination {dest}: {why(exc)}") from None
    try:
        yield staging
        if dest.exists():
            dest.rmdir()
        os.replace(staging, dest)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise StorageError(f"cannot write destination {dest}: {why(exc)}") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _write_file(
    pieces: PieceStore,
    entry: FileEntry,
    root: Path,
    progress: Progress | None,
    opener: Opener | None,
) -> None:
    target = root / entry.path
    # Manifest paths are validated relative paths and the staging tree is ours alone, but check
    # anyway that no component resolves outside it before writing.
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.parent.resolve().is_relative_to(root.resolve()):
        raise InvalidInput(f"{entry.path}: resolves outside the destination")
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        # Pieces land at their offsets with positional writes, several at once.
        place = opener.placer(pieces, entry, fd) if opener else partial(pieces.copy_piece, fd=fd)
        placed = fetch_in_order(place, entry.pieces)
        for index, ref in enumerate(entry.pieces):
            try:
                next(placed)
            except IntegrityError as exc:
                raise IntegrityError(
                    f"{entry.path}: piece {index} at offset {ref.offset} — {exc}"
                ) from None
            if progress:
                progress(ref.size)
    finally:
        os.close(fd)
    mode = written_mode(entry.mode)
    os.chmod(target, mode & OWNER_ONLY if opener else mode)


def verify(
    pieces: PieceStore, manifest: Manifest, progress: Progress | None = None
) -> list[Problem]:
    """Re-hash every stored piece of the artifact; return what is missing or corrupt."""

    def check(ref: PieceRef) -> str | None:
        try:
            data = pieces.backend.get(piece_key(ref.hash))
        except NotFound:
            return "missing"
        return None if len(data) == ref.size and sha256_hex(data) == ref.hash else "corrupt"

    located = [
        (entry.path, index, ref)
        for entry in manifest.files
        for index, ref in enumerate(entry.pieces)
    ]
    problems = []
    for (path, index, ref), reason in zip(
        located, fetch_in_order(check, (r for _, _, r in located)), strict=True
    ):
        if reason:
            problems.append(Problem(path, index, ref.hash, reason))
        if progress:
            progress(ref.size)
    return problems
