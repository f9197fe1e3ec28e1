"""Decontamination: flag documents that share a long word n-gram with a benchmark file.

Benchmark files are text, one example per line. Their n-grams are hashed once per task; a
document is `contaminated` if any of its n-grams is among them (selection drops those). A
document that takes longer than `decontam.timeout_s` goes to quarantine by name, in a worker
process that is killed and replaced (`shipyard.data.isolate`).
"""

import functools
from pathlib import Path
from typing import ClassVar

import numpy as np

from shipyard.data.batch import Batch, Quarantine, guarded_map, keep_rows
from shipyard.data.config import PipelineConfig
from shipyard.data.minhash import U64, shingles
from shipyard.data.stages.base import Stage, register
from shipyard.data.words import words
from shipyard.errors import InvalidInput


@functools.cache
def benchmark_ngrams(paths: tuple[str, ...], n: int) -> U64:
    found = []
    for path in paths:
        try:
            lines = Path(path).read_text(errors="replace").splitlines()
        except OSError as exc:
            raise InvalidInput(f"decontam.benchmarks: cannot read {path}: {exc.strerror}") from None
        found += [shingles(line, n) for line in lines if len(words(line)) >= n]
    return np.unique(np.concatenate(found)) if found else np.empty(0, np.uint64)


@register
class Decontam(Stage):
    name: ClassVar[str] = "decontam"
    version: ClassVar[str] = "2"
    section: ClassVar[str] = "decontam"

    def __init__(self, config: PipelineConfig) -> None:
        self.n = config.decontam.ngram
        self.table = benchmark_ngrams(config.decontam.benchmarks, self.n)
        self.timeout_s = config.decontam.timeout_s

    def process(self, batch: Batch, quarantine: Quarantine) -> Batch:
        if len(self.table) == 0:
            batch["contaminated"] = [False] * len(batch["text"])
            return batch
        texts = batch["text"]

        def one(i: int) -> bool:
            if len(words(texts[i])) < self.n:
                return False
            return bool(np.isin(shingles(texts[i], self.n), self.table).any())

        kept, flags = guarded_map(batch, self.name, quarantine, one, self.timeout_s)
        out = keep_rows(batch, kept)
        out["contaminated"] = flags
        return out
