"""Heuristic quality filters as columns: `<rule>_ok` and `<rule>_reason` per document.

The text is split into words once (`shipyard.data.words.tokens`) and every rule reads that list.

Nothing is deleted here; selection later decides which rules to honour.
"""

from collections.abc import Callable
from typing import ClassVar

from shipyard.data.batch import Batch, Quarantine
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
        self.enabled = {rule: bool(getattr(config.filters, rule)) for rule in RULES}

    def process(self, batch: Batch, quarantine: Quarantine) -> Batch:
        words = [tokens(text) for text in batch["text"]]
        for rule, check in RULES.items():
            if self.enabled[rule]:
                reasons = [check(t, w) for t, w in zip(batch["text"], words, strict=True)]
            else:
                reasons = [""] * len(words)
            batch[f"{rule}_reason"] = reasons
            batch[f"{rule}_ok"] = [not r for r in reasons]
        return batch
