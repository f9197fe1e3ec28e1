"""Each record's outcome in a stage, written as it is decided, so a retry resumes after it.

A stage's output is committed only once every record of the file went through it; an attempt
killed before that (its deadline, a crash of the task process) would otherwise lose every record
it had decided. `Journal` appends one JSON line per decided record to a file beside the cache
(`<cache>/.guard/<stage key>.<stage>.journal`): the stage's result, or the reason it was set
aside. The next attempt takes each decided record from the journal instead of running it again.

A timeout is not a verdict on the record's content (a busy machine, a slow moment): it holds for
the run that met it, so a retry within the run does not spend the budget again, and a later run
tries the record again (`run` tells them apart). A torn last line (the attempt was killed while
writing it) is ignored.
"""

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Verdict = Literal["ok", "quarantined", "timeout"]


@dataclass(frozen=True)
class Entry:
    verdict: Verdict
    value: Any  # the stage's result for the record ("ok"), else the quarantine reason


class Journal:
    def __init__(self, path: Path, run: str) -> None:
        self.path = path
        self.run = run
        self.entries = self._load()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.timeouts = sum(1 for e in self.entries.values() if e.verdict == "timeout")

    def _load(self) -> dict[str, Entry]:
        entries: dict[str, Entry] = {}
        try:
            text = self.path.read_text(encoding="ascii", errors="replace")
        except FileNotFoundError:
            return entries
        for line in text.split("\n")[:-1]:  # the last piece has no newline: torn, or empty
            try:
                doc_id, verdict, value, run = json.loads(line)
            except (ValueError, TypeError):
                continue
            if verdict == "timeout" and run != self.run:
                continue  # another run's timeout: try the record again
            if verdict in ("ok", "quarantined", "timeout"):
                entries[str(doc_id)] = Entry(verdict, value)
        return entries

    def get(self, doc_id: str) -> Entry | None:
        return self.entries.get(doc_id)

    def add(self, doc_id: str, verdict: Verdict, value: Any) -> None:
        # No fsync: only a process death needs to see this, and the page cache outlives that.
        line = json.dumps([doc_id, verdict, value, self.run]) + "\n"  # ASCII: lossless
        os.write(self._fd, line.encode())
        self.entries[doc_id] = Entry(verdict, value)
        self.timeouts += verdict == "timeout"

    def close(self, keep: bool) -> None:
        """Stop writing; keep the journal (its stage's output holds timeouts, which a later run
        tries again) or delete it."""
        os.close(self._fd)
        if not keep:
            self.path.unlink(missing_ok=True)
