"""Heuristic quality filters as columns: `<rule>_ok` and `<rule>_reason` per document.

The text is split into words once (`shipyard.data.words.tokens`) and every rule reads that list.
Nothing is deleted here; selection later decides which rules to honour. A document that keeps the
rules busy past `filters.timeout_s` (spaCy's prefix rules are quadratic in a run of `(`) goes to
quarantine by name, in a worker process that is killed and replaced (`shipyard.data.isolate`).
"""

from collections.abc import Callable
from typing import ClassVar

from shipyard.data.batch import Batch, Quarantine, guarded_map, keep_rows
from shipyard.data.config import PipelineConfig
from shipyard.data.stages import c4fineweb, gopher
from shipyard.data.stages.base import Stage, register
from shipyard.data.words import tokens

Rule = Callable[[str, list[str]], str]

RULES: dict[str, Rule] = {
    "gopher_repetition": gopher.repetition,
    "gopher_quality": gopher.quality,
    "c4": lambda text, words: c4fineweb.c4(text),
    "fineweb": c4fineweb.fineweb,
}


@register
class Filters(Stage):
    name: ClassVar[str] = "filters"
    version: ClassVar[str] = "2"
    section: ClassVar[str] = "filters"

    def __init__(self, config: PipelineConfig) -> None:
        self.checks = {
            rule: check for rule, check in RULES.items() if getattr(config.filters, rule)
        }
        self.timeout_s = config.filters.timeout_s

    def process(self, batch: Batch, quarantine: Quarantine) -> Batch:
        texts = batch["text"]
        if not self.checks:  # nothing to judge: no words to split, no worker to start
            kept = list(range(len(texts)))
            reasons: list[dict[str, str]] = [{} for _ in texts]
            return self._annotated(batch, kept, reasons)

        def one(i: int) -> dict[str, str]:
            words = tokens(texts[i])
            return {rule: check(texts[i], words) for rule, check in self.checks.items()}

        kept, reasons = guarded_map(batch, self.name, quarantine, one, self.timeout_s)
        return self._annotated(batch, kept, reasons)

    @staticmethod
    def _annotated(batch: Batch, kept: list[int], reasons: list[dict[str, str]]) -> Batch:
        out = keep_rows(batch, kept)
        for rule in RULES:
            out[f"{rule}_reason"] = [r.get(rule, "") for r in reasons]
            out[f"{rule}_ok"] = [not r.get(rule) for r in reasons]
        return out
