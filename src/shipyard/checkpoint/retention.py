"""Retention: keep the last `keep_last` committed checkpoints and every `keep_every`-th step.

Deleting removes the manifest first (and syncs that), so a half-deleted checkpoint is never taken
for a committed one. Uncommitted directories older than the newest committed checkpoint are
leftovers of crashed saves and go too.
"""

import shutil
from dataclasses import dataclass
from pathlib import Path

from shipyard.checkpoint.manifest import MANIFEST, committed, step_dirs
from shipyard.durable import fsync_dir
from shipyard.errors import InvalidInput


@dataclass(frozen=True)
class Retention:
    keep_last: int = 3
    keep_every: int = 0  # 0: keep no extra

    def __post_init__(self) -> None:
        if self.keep_last < 1:
            raise InvalidInput(f"retention keep_last must be >= 1, got {self.keep_last}")
        if self.keep_every < 0:
            raise InvalidInput(f"retention keep_every must be >= 0, got {self.keep_every}")

    def kept(self, steps: list[int]) -> set[int]:
        keep = set(sorted(steps)[-self.keep_last :])
        if self.keep_every:
            keep |= {s for s in steps if s % self.keep_every == 0}
        return keep


def apply_retention(root: Path, retention: Retention) -> list[int]:
    """Delete what `retention` does not keep; returns the deleted steps."""
    done = [c.step for c in committed(root)]
    if not done:
        return []
    keep = retention.kept(done)
    deleted = []
    for step, path in step_dirs(root):
        stale = step not in done and step < done[-1]
        if (step in done and step not in keep) or stale:
            (path / MANIFEST).unlink(missing_ok=True)
            fsync_dir(path)
            shutil.rmtree(path, ignore_errors=True)
            deleted.append(step)
    return deleted
