"""Durable file writes: temp file, fsync, rename, directory fsync.

A file written here is either absent or complete after a crash at any instant: readers only ever
see the final name, which appears by an atomic rename once the bytes are on disk.
"""

import os
import uuid
from collections.abc import Iterable
from pathlib import Path


def fsync_dir(directory: Path) -> None:
    """Make renames and creations inside `directory` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_path(final: Path) -> Path:
    """A hidden, unique sibling of `final`: same filesystem, so the final rename is atomic."""
    return final.with_name(f".{final.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")


def write_fd(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data).cast("B")
    while view:
        view = view[os.write(fd, view) :]


def write_atomic(final: Path, data: bytes | memoryview, *, sync_dir: bool = True) -> None:
    """Write `data` to `final` so that `final` is never seen half-written."""
    write_chunks_atomic(final, [data], sync_dir=sync_dir)


def write_chunks_atomic(
    final: Path, chunks: Iterable[bytes | memoryview], *, sync_dir: bool = True
) -> None:
    """Write `chunks` one after another to `final`, never seen half-written."""
    tmp = temp_path(final)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            for chunk in chunks:
                write_fd(fd, chunk)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync_dir:
        fsync_dir(final.parent)
