"""Making a SQLite database file without anyone ever seeing half of one.

Only a missing file means a fresh database. A new one is built beside its final name and linked
into place (a link never replaces, so the first of several racing openers wins); an existing file
that is empty is refused by name, never replaced: it held every alias, lineage record and queue
item. The file is private (0600: it holds job commands and lineage); one of this user's made
readable by others before is tightened to 0600 when opened.
"""

import os
import sqlite3
import uuid
from contextlib import suppress
from pathlib import Path

from shipyard.errors import StorageError


def ensure_file(path: Path, label: str = "database") -> None:
    """Make a fresh, empty WAL-mode database at `path` if nothing is there; refuse an empty file.

    Every opener of a SQLite database calls this first. The schema is the migrations' job.
    """
    try:
        if path.stat().st_size == 0:
            raise StorageError(
                f"{label} {path} is an empty file, not a {label}: refusing to start a fresh one "
                "over it. Restore it from a backup, or move it aside to start afresh"
            )
        _make_private(path)
        return
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise StorageError(f"cannot open {label} {path}: {exc.strerror}") from None
    fresh = path.with_name(f".{path.name}.new-{uuid.uuid4().hex[:12]}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # 0600 before SQLite writes a byte; its -wal and -shm files copy the database's mode.
        os.close(os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
        db = sqlite3.connect(fresh, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")  # writes the header: the file is never empty
        finally:
            db.close()
        with suppress(FileExistsError):
            os.link(fresh, path)
    except (OSError, sqlite3.Error) as exc:
        raise StorageError(f"cannot create {label} {path}: {exc}") from None
    finally:
        fresh.unlink(missing_ok=True)


def _make_private(path: Path) -> None:
    """Take group/other access away from a database (and its -wal, -shm) made before 0600."""
    for part in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        with suppress(FileNotFoundError):
            info = part.stat()
            if info.st_uid == os.geteuid() and info.st_mode & 0o077:
                part.chmod(info.st_mode & 0o600)
