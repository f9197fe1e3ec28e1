"""Store a directory (or one file) as an artifact: split, hash, write pieces, then the manifest.

Pieces are written before the manifest that names them, and the manifest last: a put killed at any
moment leaves only unreferenced pieces (invisible, collected by `gc`), never a manifest that points
at missing bytes. Re-running the put skips every piece already stored.
"""

import os
import stat
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shipyard.errors import InvalidInput, StorageError
from shipyard.store.leases import put_lease
from shipyard.store.manifest import (
    MAX_MODE,
    FileEntry,
    Manifest,
    PieceRef,
    PieceSeal,
    validate_relative_path,
)
from shipyard.store.pieces import PieceStore
from shipyard.store.pipeline import PieceWriter
from shipyard.store.sealed import Keyring, Sealer

DEFAULT_PIECE_SIZE = 16 << 20
MIN_PIECE_SIZE = 64 << 10
MAX_PIECE_SIZE = 64 << 20

Progress = Callable[[int], None]


@dataclass(frozen=True)
class SourceFile:
    path: Path
    relpath: str
    size: int
    mode: int


@dataclass(frozen=True)
class Source:
    """What a put stores: the regular files under a root in sorted order, and the empty
    directories it leaves out (an artifact holds files; a directory exists only as a file's
    parent)."""

    files: list[SourceFile]
    empty_dirs: list[str]

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)


def scan_source(root: Path) -> Source:
    """The files under `root`; refuses what cannot be stored faithfully, naming it: an unreadable
    directory or file, a symlink loop or one leading out of `root`, a fifo or device."""
    root = root.resolve() if root.exists() else root
    if not root.exists():
        raise InvalidInput(f"source {root} does not exist")
    if root.is_file():
        return Source([_source_file(root, root.name, root)], [])
    files, empty_dirs = [], []
    for dirpath, dirnames, filenames in os.walk(root, onerror=_refuse, followlinks=False):
        dirnames.sort()
        links = [d for d in dirnames if Path(dirpath, d).is_symlink()]
        for name in sorted(filenames) + links:
            full = Path(dirpath, name)
            files.append(_source_file(full, full.relative_to(root).as_posix(), root))
        if not dirnames and not filenames and dirpath != str(root):
            empty_dirs.append(Path(dirpath).relative_to(root).as_posix())
    return Source(sorted(files, key=lambda f: f.relpath), empty_dirs)


def _refuse(exc: OSError) -> None:
    # os.walk skips a directory it cannot list unless told otherwise: a put would then commit an
    # artifact that silently lacks that directory's files.
    raise InvalidInput(f"cannot read source directory {exc.filename}: {exc.strerror}")


def _source_file(full: Path, rel: str, root: Path) -> SourceFile:
    validate_relative_path(rel)
    if full.is_symlink():
        try:
            target = full.resolve(strict=True)
        except RuntimeError:  # Python < 3.13 reports a loop this way, later ones as ELOOP
            raise InvalidInput(f"{full}: symlink loop") from None
        except OSError as exc:
            raise InvalidInput(f"cannot read source file {full}: {exc.strerror}") from None
        if not target.is_relative_to(root):
            raise InvalidInput(f"{full}: symlink points outside the source ({target})")
        if target.is_dir():
            raise InvalidInput(f"{full}: symlink to a directory; store the directory instead")
    try:
        st = full.stat()
    except OSError as exc:
        raise InvalidInput(f"cannot read source file {full}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise InvalidInput(f"{full}: not a regular file")
    if not os.access(full, os.R_OK):
        raise InvalidInput(f"cannot read source file {full}: permission denied")
    # Only permission bits travel: a setuid, setgid or sticky bit is not stored.
    return SourceFile(full, rel, st.st_size, st.st_mode & MAX_MODE)


def put_tree(
    pieces: PieceStore,
    source: Path,
    kind: str,
    piece_size: int = DEFAULT_PIECE_SIZE,
    metadata: dict[str, Any] | None = None,
    run: str | None = None,
    progress: Progress | None = None,
    encrypt_with: Keyring | None = None,
) -> Manifest:
    """Store every file under `source`; return the committed manifest. With `encrypt_with`, the
    artifact is confidential: its pieces are stored encrypted under the keyring's first key."""
    if not MIN_PIECE_SIZE <= piece_size <= MAX_PIECE_SIZE:
        raise InvalidInput(
            f"piece_size {piece_size} must be between {MIN_PIECE_SIZE} and {MAX_PIECE_SIZE}"
        )
    sealer = encrypt_with.sealer() if encrypt_with is not None else None
    files = scan_source(Path(source)).files
    writer = PieceWriter(pieces, piece_size)
    try:
        with put_lease(pieces.backend) as lease:
            entries = [_put_file(writer, src, lease.refresh, progress, sealer) for src in files]
            manifest = Manifest(
                kind=kind,
                piece_size=piece_size,
                files=tuple(entries),
                metadata=metadata or {},
                run=run,
                encryption=sealer.header if sealer else None,
            )
            if sealer:
                manifest = sealer.seal_manifest(manifest)
            lease.refresh()
            pieces.put_manifest(manifest)
    finally:
        writer.close()
    return manifest


def _put_file(
    writer: PieceWriter,
    src: SourceFile,
    heartbeat: Callable[[], None],
    progress: Progress | None,
    sealer: Sealer | None,
) -> FileEntry:
    stored: list[tuple[Future[tuple[str, PieceSeal | None]], int, int]] = []
    offset = 0
    try:
        with open(src.path, "rb", buffering=0) as fh:
            while n := _read_full(fh, view := writer.buffer()):
                seal = (
                    sealer.piece_sealer(src.relpath, len(stored), offset, src.size)
                    if sealer
                    else None
                )
                stored.append((writer.submit(view[:n], seal), offset, n))
                offset += n
                heartbeat()
                if progress:
                    progress(n)
    except OSError as exc:
        raise StorageError(f"cannot read source file {src.path}: {exc.strerror}") from exc
    if offset != src.size:
        raise InvalidInput(f"{src.path} changed size while it was stored ({src.size} → {offset})")
    results = [(future.result(), start, n) for future, start, n in stored]
    refs = tuple(PieceRef(piece_hash, start, n) for (piece_hash, _), start, n in results)
    seals = tuple(seal for (_, seal), _, _ in results if seal) if sealer else None
    return FileEntry(src.relpath, offset, src.mode, refs, seals)


def _read_full(fh: Any, view: memoryview) -> int:
    """Fill `view` from `fh` unless the file ends first; return the byte count."""
    total = 0
    while total < len(view):
        n = fh.readinto(view[total:])
        if not n:
            break
        total += n
    return total
