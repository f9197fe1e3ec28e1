"""An n-gram index of every registered task's items, and overlap reports against a corpus.

It hashes word n-grams with the data pipeline's own code (`shipyard.data.minhash.shingles` over
`shipyard.data.words`, n = the decontamination stage's default), so an item this index finds in a
corpus is one the pipeline's `decontam` stage would flag, and `export_benchmarks` writes the file
that stage reads (one example per line).
"""

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shipyard.data.config import DecontamConfig
from shipyard.data.minhash import shingles
from shipyard.data.words import words
from shipyard.durable import write_atomic
from shipyard.errors import InvalidInput, StorageError
from shipyard.evals.tasks import Item, Task, answer_text, render

DEFAULT_N = DecontamConfig().ngram
DEFAULT_THRESHOLD = 0.01  # flag a task when at least 1% of its checkable items overlap


def item_text(task: Task, item: Item) -> str:
    return " ".join((render(task.template, item.fields) + " " + answer_text(item)).split())


@dataclass
class TaskIndex:
    task: str
    item_ids: list[str]
    grams: list[np.ndarray]  # per item, less boilerplate; empty when shorter than n words


class ContaminationIndex:
    def __init__(self, tasks: Sequence[Task], n: int = DEFAULT_N) -> None:
        if n < 1:
            raise InvalidInput("n-gram length must be at least 1")
        self.n = n
        self.tasks: list[TaskIndex] = []
        for task in tasks:
            ids, grams = [], []
            for item in task.load():
                text = item_text(task, item)
                ids.append(item.id)
                long_enough = len(words(text)) >= n
                grams.append(shingles(text, n) if long_enough else np.empty(0, np.uint64))
            self.tasks.append(TaskIndex(task.name, ids, _without_boilerplate(grams)))
        every = [g for t in self.tasks for g in t.grams if len(g)]
        self.table = np.unique(np.concatenate(every)) if every else np.empty(0, np.uint64)

    def check(
        self, documents: Iterable[str], threshold: float = DEFAULT_THRESHOLD
    ) -> list[dict[str, Any]]:
        """Per task: items, items long enough to check, items sharing an n-gram with any
        document, that fraction, and whether it reaches `threshold`."""
        hits: set[int] = set()
        for text in documents:
            if len(words(text)) >= self.n and len(self.table):
                grams = shingles(text, self.n)
                hits.update(int(g) for g in grams[np.isin(grams, self.table)])
        found = np.fromiter(hits, np.uint64, len(hits))
        report = []
        for index in self.tasks:
            checkable = [g for g in index.grams if len(g)]
            overlapping = sorted(
                item_id
                for item_id, g in zip(index.item_ids, index.grams, strict=True)
                if len(g) and bool(np.isin(g, found).any())
            )
            fraction = len(overlapping) / len(checkable) if checkable else 0.0
            report.append(
                {
                    "task": index.task,
                    "items": len(index.item_ids),
                    "checkable": len(checkable),
                    "overlapping": len(overlapping),
                    "fraction": fraction,
                    "flagged": bool(checkable) and fraction >= threshold,
                    "examples": overlapping[:5],
                }
            )
        return report


def _without_boilerplate(grams: list[np.ndarray]) -> list[np.ndarray]:
    """Drop n-grams that many of a task's items share (its instructions, a template's fixed
    text): a corpus that quotes the instructions has not seen the items."""
    sets = [np.unique(g) for g in grams]
    if not any(len(g) for g in sets):
        return sets
    values, counts = np.unique(np.concatenate(sets), return_counts=True)
    common = values[counts > max(2, len(grams) // 20)]
    return [g[~np.isin(g, common)] for g in sets]


def export_benchmarks(tasks: Sequence[Task], path: Path) -> int:
    """Write every task's items, one per line, for the data pipeline's `decontam.benchmarks`."""
    lines = [item_text(task, item) for task in tasks for item in task.load()]
    try:  # whole or not at all: a file that was there stays as it was
        write_atomic(path, ("\n".join(lines) + "\n").encode())
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as exc:
        raise InvalidInput(f"{path}: cannot write the benchmark file: {exc.strerror}") from None
    except OSError as exc:
        raise StorageError(f"{path}: cannot write the benchmark file: {exc.strerror}") from None
    return len(lines)


def read_corpus(path: Path) -> Iterator[str]:
    """Documents from a file or a directory of files: `.jsonl` (each line's `text`) or plain
    text (one document per line)."""
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    if not files or not files[0].exists():
        raise InvalidInput(f"{path}: no corpus files there")
    for file in files:
        try:
            with file.open(encoding="utf-8", errors="replace") as lines:
                for number, line in enumerate(lines, 1):
                    if file.suffix == ".jsonl" and line.strip():
                        yield _text_of(line, f"{file}:{number}")
                    elif line.strip():
                        yield line
        except OSError as exc:
            raise InvalidInput(f"{file}: cannot read: {exc.strerror}") from None


def _text_of(line: str, where: str) -> str:
    try:
        record = json.loads(line)
    except (json.JSONDecodeError, RecursionError):
        raise InvalidInput(f"{where}: not JSON") from None
    if not isinstance(record, dict) or not isinstance(record.get("text"), str):
        raise InvalidInput(f"{where}: a corpus line must be an object with a string 'text'")
    return str(record["text"])
