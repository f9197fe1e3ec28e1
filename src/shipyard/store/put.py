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
from shipyard.store.manifest import FileEntry, Manifest, PieceRef, validate_relative_path
from shipyard.store.pieces import PieceStore
from shipyard.store.pipeline import PieceWriter

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


def scan_source(root: Path) -> list[SourceFile]:
    """The regular files under `root` in sorted order; refuses what cannot be stored faithfully."""
    root = root.resolve() if root.exists() else root
    if not root.exists():
        raise InvalidInput(f"source {root} does not exist")
    if root.is_file():
        return [_source_file(root, root.name, root)]
    files = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames) + [d for d in dirnames if Path(dirpath, d).is_symlink()]:
            full = Path(dirpath, name)
            rel = full.relative_to(root).as_posix()
            files.append(_source_file(full, rel, root))
    return sorted(files, key=lambda f: f.relpath)


def _source_file(full: Path, rel: str, root: Path) -> SourceFile:
    validate_relative_path(rel)
    if full.is_symlink():
        target = full.resolve()
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
    return SourceFile(full, rel, st.st_size, stat.S_IMODE(st.st_mode))


def put_tree(
    pieces: PieceStore,
    source: Path,
    kind: str,
    piece_size: int = DEFAULT_PIECE_SIZE,
    metadata: dict[str, Any] | None = None,
    run: str | None = None,
    progress: Progress | None = None,
) -> Manifest:
    """Store every file under `source`; return the committed manifest."""
    if not MIN_PIECE_SIZE <= piece_size <= MAX_PIECE_SIZE:
        raise InvalidInput(
            f"piece_size {piece_size} must be between {MIN_PIECE_SIZE} and {MAX_PIECE_SIZE}"
        )
    files = scan_source(Path(source))
    writer = PieceWriter(pieces, piece_size)
    try:
        with put_lease(pieces.backend) as lease:
            entries = [_put_file(writer, src, lease.refresh, progress) for src in files]
            manifest = Manifest(
                kind=kind,
                piece_size=piece_size,
                files=tuple(entries),
                metadata=metadata or {},
                run=run,
            )
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
) -> FileEntry:
    stored: list[tuple[Future[str], int, int]] = []
    offset = 0
    try:
        with open(src.path, "rb", buffering=0) as fh:
            while n := _read_full(fh, view := writer.buffer()):
                stored.append((writer.submit(view[:n]), offset, n))
                offset += n
                heartbeat()
                if progress:
                    progress(n)
    except OSError as exc:
        raise StorageError(f"cannot read source file {src.path}: {exc.strerror}") from exc
    if offset != src.size:
        raise InvalidInput(f"{src.path} changed size while it was stored ({src.size} → {offset})")
    refs = tuple(PieceRef(future.result(), start, n) for future, start, n in stored)
    return FileEntry(src.relpath, offset, src.mode, refs)


def _read_full(fh: Any, view: memoryview) -> int:
    """Fill `view` from `fh` unless the file ends first; return the byte count."""
    total = 0
    while total < len(view):
        n = fh.readinto(view[total:])
        if not n:
            break
        total += n
    return total
