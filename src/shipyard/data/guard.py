"""Remember which record a task was processing, so a record that kills its task is skipped.

Extraction runs in a worker process that is killed and replaced on a hang or crash
(`shipyard.data.isolate`); a record that takes the task process itself down (a crash in another
stage, the out-of-memory killer) ends the attempt, and the executor retries the task. Before
each guarded record the task writes `stage<TAB>doc_id` to an in-flight file beside its outputs
and clears it after; the retry finds the name still there, adds it to the task's poison list, and
quarantines that one record instead of running it again. One bad record never fails a task.

An attempt the executor stops at its deadline is another matter: the record it was in the middle
of did not kill it (a record has its own, smaller budget), so `interrupted` forgets that record
instead of poisoning it, and the retry runs it again. `progress` counts what a task's attempts
decided for good (records, committed stages, poisoned records): an attempt that moved it is not
charged to the task's retries, so a file finishes whatever the number of bad records in it.
"""

import os
from pathlib import Path

POISON_REASON = "killed its worker on an earlier attempt (a hang in native code, or a crash)"


def interrupted(folder: Path, task_key: str) -> None:
    """The executor stopped the task's attempt at its deadline: the record in flight is innocent."""
    (folder / f"{task_key}.inflight").unlink(missing_ok=True)


def progress(folder: Path, task_key: str) -> int:
    """Grows with every record an attempt decided for good, and with a record that killed it."""
    counted = folder / f"{task_key}.progress"
    inflight = folder / f"{task_key}.inflight"
    done = counted.stat().st_size if counted.exists() else 0
    died_on = inflight.stat().st_size > 0 if inflight.exists() else False
    poisoned = folder / f"{task_key}.poison"
    return done + (poisoned.stat().st_size if poisoned.exists() else 0) + died_on


class RecordGuard:
    def __init__(self, folder: Path, task_key: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self._inflight = folder / f"{task_key}.inflight"
        self._poison_file = folder / f"{task_key}.poison"
        self._progress = os.open(
            folder / f"{task_key}.progress", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644
        )
        died_on = self._inflight.read_text() if self._inflight.exists() else ""
        if died_on:
            with open(self._poison_file, "a") as out:
                out.write(died_on + "\n")
        self._inflight.unlink(missing_ok=True)
        lines = self._poison_file.read_text().splitlines() if self._poison_file.exists() else []
        self.poisoned = {tuple(line.split("\t", 1)) for line in lines if "\t" in line}
        self._fd = os.open(self._inflight, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def is_poisoned(self, stage: str, doc_id: str) -> bool:
        return (stage, doc_id) in self.poisoned

    def enter(self, stage: str, doc_id: str) -> None:
        # No fsync: only a process death needs to see this, and the page cache outlives that.
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{stage}\t{doc_id}".encode(), 0)

    def leave(self) -> None:
        os.ftruncate(self._fd, 0)

    def advance(self) -> None:
        """Something was decided for good (a record, a committed stage): count it."""
        os.write(self._progress, b".")

    def close(self, task_done: bool) -> None:
        """Stop guarding; a finished task no longer needs its poison list nor its count."""
        os.close(self._fd)
        os.close(self._progress)
        self._inflight.unlink(missing_ok=True)
        if task_done:
            self._poison_file.unlink(missing_ok=True)
            (self.folder / f"{self._poison_file.stem}.progress").unlink(missing_ok=True)
