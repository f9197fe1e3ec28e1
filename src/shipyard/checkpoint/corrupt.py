"""The corrupt mark: one path for every checkpoint refused after it was committed.

A committed checkpoint is refused when a shard fails its SHA-256 (`shard-hash`), a shard is
missing or not its recorded size (`shard-missing`), or its manifest is unreadable or fails a field
check (`manifest-invalid`), fails its own digest (`manifest-digest`) or names another step than its
directory (`step-mismatch`). Each refusal is a `CorruptCheckpoint` naming the step, the file, the
piece if known and the reason, and writes `corrupt.json` beside the manifest (once: the first
finder's record is kept), so nothing loads or retries it and the training controller reports it
as a `corrupt-checkpoint` event.
"""

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

from shipyard.durable import fsync_dir, temp_path, write_atomic
from shipyard.errors import IntegrityError

CORRUPT = "corrupt.json"  # a committed checkpoint refused after its commit: never loaded
REASONS = ("shard-hash", "shard-missing", "manifest-invalid", "manifest-digest", "step-mismatch")


class CorruptCheckpoint(IntegrityError):
    """Checkpoint `step` refused: `source` (a file or a peer) is damaged; `reason` says how."""

    def __init__(
        self, step: int, source: str, piece: str | None, problem: str, reason: str = "shard-hash"
    ) -> None:
        assert reason in REASONS, reason
        self.step, self.source, self.piece, self.problem = step, source, piece, problem
        self.reason = reason
        if piece:
            where = f", piece {piece!r}"
        else:
            where = ", an unnamed piece (no per-piece checksums)" if reason == "shard-hash" else ""
        super().__init__(
            f"checkpoint of step {step} is corrupt ({reason}): {source}{where}: {problem}"
        )

    def record(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "file": self.source,
            "piece": self.piece,
            "problem": self.problem,
            "reason": self.reason,
        }


def mark_corrupt(directory: Path, error: CorruptCheckpoint) -> None:
    """Mark once: the first reader to find the damage writes the record, later ones keep it (a
    hard link of a complete temp file: never half-written, never overwritten). Read-only
    storage: the checkpoint is refused all the same, unmarked."""
    final = directory / CORRUPT
    if final.exists():
        return
    record = {**error.record(), "marked_at": time.time()}
    tmp = temp_path(final)
    with contextlib.suppress(OSError):
        try:
            write_atomic(tmp, json.dumps(record).encode(), sync_dir=False)
            with contextlib.suppress(FileExistsError):  # another reader marked it meanwhile
                os.link(tmp, final)
        finally:
            tmp.unlink(missing_ok=True)
        fsync_dir(directory)


def marked_problem(directory: Path) -> str:
    """What the mark in `directory` says was wrong, shortened for a message."""
    try:
        record = json.loads((directory / CORRUPT).read_bytes())
    except (OSError, ValueError):
        return "unreadable"
    problem = record.get("problem") if isinstance(record, dict) else None
    return str(problem)[:500] if problem else "no problem recorded"


def corrupt_marks(root: Path) -> list[dict[str, Any]]:
    """The records of every checkpoint under `root` marked corrupt (unreadable ones skipped)."""
    marks = []
    for path in sorted(Path(root).glob(f"step-*/{CORRUPT}")):
        try:
            record = json.loads(path.read_bytes())
        except (OSError, ValueError):
            continue  # half-gone with its directory, or not ours: nothing to report
        if isinstance(record, dict):
            marks.append(record)
    return marks
