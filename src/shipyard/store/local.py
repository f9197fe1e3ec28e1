"""A backend over a local directory: the embedded default."""

import errno
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

from shipyard.durable import fsync_dir, write_fd
from shipyard.errors import NotFound, StorageError
from shipyard.store.backend import ObjectInfo

# Temp files live inside the root so that the final rename never crosses a filesystem; the
# directory names start with a dot and are skipped by `list`, so half-written objects are
# invisible. Partial pieces (see `partial`) are files that transfers resume.
_TMP_DIR = ".tmp"
PARTIAL_DIR = ".partial"


def why(exc: OSError) -> str:
    """A failed write's reason, as a message says it."""
    return "disk full" if exc.errno == errno.ENOSPC else exc.strerror or str(exc)


class LocalBackend:
    """Objects as files under `root`; a put writes a temp file and renames it into place."""

    def __init__(self, root: str | Path, fsync: bool = True) -> None:
        self.root = Path(root).expanduser().resolve()
        self.fsync = fsync
        try:
            (self.root / _TMP_DIR).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot use {self.root} as a store: {exc.strerror}") from exc

    @property
    def uri(self) -> str:
        return self.root.as_uri()

    def path(self, key: str) -> Path:
        """The file that holds `key` (it may not exist); used for zero-copy serving."""
        if not key or key.startswith("/") or ".." in key.split("/"):
            raise ValueError(f"invalid object key {key!r}")
        return self.root / key

    def stat(self, key: str) -> ObjectInfo | None:
        try:
            st = self.path(key).stat()
        except FileNotFoundError:
            return None
        return ObjectInfo(key, st.st_size, st.st_mtime)

    def get(self, key: str) -> bytes:
        try:
            return self.path(key).read_bytes()
        except FileNotFoundError:
            raise NotFound(f"object {key!r} not found in {self.uri}") from None

    def put(self, key: str, data: bytes | memoryview) -> None:
        self.path(key)  # a bad key is refused before anything is written
        tmp = self.root / _TMP_DIR / f"{uuid.uuid4().hex}.part"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                write_fd(fd, data)
                self.put_file(key, tmp, fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise StorageError(f"cannot write {key!r} under {self.root}: {why(exc)}") from exc
        finally:
            tmp.unlink(missing_ok=True)  # already gone once renamed into place

    def put_file(self, key: str, path: Path, fd: int) -> None:
        """Move the finished file `path` (open as `fd`) into place as `key`: no copy. It must be
        on this store's filesystem (under its root)."""
        final = self.path(key)
        try:
            if self.fsync:
                os.fsync(fd)
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, final)
            if self.fsync:
                fsync_dir(final.parent)
        except OSError as exc:
            raise StorageError(f"cannot write {key!r} under {self.root}: {why(exc)}") from exc

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        # Walk only the directory that holds the prefix, not the whole store.
        base = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        top = self.root / base
        if not top.is_dir():
            return
        for dirpath, dirnames, filenames in os.walk(top):
            rel_dir = Path(dirpath).relative_to(self.root).as_posix()
            dirnames[:] = [d for d in dirnames if not (rel_dir == "." and d.startswith("."))]
            for name in filenames:
                key = name if rel_dir == "." else f"{rel_dir}/{name}"
                if key.startswith(prefix):
                    try:
                        st = os.stat(os.path.join(dirpath, name))
                    except FileNotFoundError:
                        continue  # deleted while we walked
                    yield ObjectInfo(key, st.st_size, st.st_mtime)

    def delete(self, key: str) -> None:
        self.path(key).unlink(missing_ok=True)

    def clean_temp(self, older_than: float) -> int:
        """Remove temp files and partial pieces left by killed writers whose mtime is before
        `older_than`."""
        removed = 0
        for directory in (self.root / _TMP_DIR, self.root / PARTIAL_DIR):
            if not directory.is_dir():
                continue
            for entry in os.scandir(directory):
                try:
                    if entry.stat().st_mtime < older_than:
                        os.unlink(entry.path)
                        removed += 1
                except FileNotFoundError:
                    continue
        return removed
