"""Making a SQLite database file without anyone ever seeing half of one.

Only a missing file means a fresh database. A new one is built beside its final name and linked
into place (a link never replaces, so the first of several racing openers wins); an existing file
that is empty is refused by name, never replaced: it held every alias, lineage record and queue
item.
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
        return
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise StorageError(f"cannot open {label} {path}: {exc.strerror}") from None
    fresh = path.with_name(f".{path.name}.new-{uuid.uuid4().hex[:12]}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
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
