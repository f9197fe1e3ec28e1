"""The stage interface and the registry that maps a stage name to its class.

A stage is a small typed unit: it is built from the pipeline config, takes a batch and returns
the batch with new columns. Its output is cached under a key made of its name, `version` (bump it
when the stage's output changes), the hash of its config `section` and its input's key.
"""

import importlib
from abc import ABC, abstractmethod
from typing import ClassVar, TypeVar

from shipyard.data.batch import Batch, Quarantine
from shipyard.data.config import PipelineConfig
from shipyard.errors import InvalidInput

# The per-document stages in the order a task applies them (reading comes first, always). Each
# stage's cached output is keyed on the one before it, so a changed section reruns that stage and
# those after it: the stages that only add columns come last, MinHash last of all, so a [dedup]
# change reruns MinHash alone (and it hashes the redacted text that ends up in the table).
DOC_STAGES = ("extract", "langid", "filters", "pii", "decontam", "minhash")

_MODULES = {
    "extract": "shipyard.data.stages.extract",
    "langid": "shipyard.data.stages.langid",
    "filters": "shipyard.data.stages.filters",
    "minhash": "shipyard.data.stages.signature",
    "pii": "shipyard.data.stages.pii",
    "decontam": "shipyard.data.stages.decontam",
}


class Stage(ABC):
    name: ClassVar[str]
    version: ClassVar[str]
    section: ClassVar[str]  # the PipelineConfig field its settings live in
    # the section's fields that decide this stage's output (None: all of them); the others
    # (say, clustering settings read after every file is done) do not enter its cache key
    fields: ClassVar[tuple[str, ...] | None] = None

    @abstractmethod
    def __init__(self, config: PipelineConfig) -> None: ...

    @abstractmethod
    def process(self, batch: Batch, quarantine: Quarantine) -> Batch: ...


_REGISTRY: dict[str, type[Stage]] = {}
S = TypeVar("S", bound=type[Stage])


def register(cls: S) -> S:
    _REGISTRY[cls.name] = cls
    return cls


def get_stage(name: str) -> type[Stage]:
    if name not in _REGISTRY and name in _MODULES:
        importlib.import_module(_MODULES[name])
    try:
        return _REGISTRY[name]
    except KeyError:
        raise InvalidInput(f"unknown stage {name!r} (known: {', '.join(_MODULES)})") from None
