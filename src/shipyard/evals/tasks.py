"""Tasks as versioned plugins: dataset + prompt template + few-shot set + solver + scorer.

A `Task` is pure data plus a loader; everything that can change a score is part of its key
(`Task.fingerprint`): its name and version, the template text, the few-shot items, the solver's
sampling parameters and the scorer (with its judge version). Two runs that differ in any of those
never share results.
"""

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from shipyard.errors import InvalidInput, NotFound
from shipyard.hashing import canonical_json, sha256_hex

Kind = Literal["mc", "gen", "code"]
KINDS: tuple[Kind, ...] = ("mc", "gen", "code")
SCORERS = ("mc", "exact", "numeric", "code")
TASK_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]{0,63})\}")


@dataclass(frozen=True)
class Item:
    """One evaluation item. `fields` fill the template; `target` is what a scorer compares
    against (an index into `choices` for multiple choice); `tests` is code for code tasks."""

    id: str
    fields: Mapping[str, str]
    target: str | int
    choices: tuple[str, ...] = ()
    cluster: str | None = None
    tests: str = ""
    entry_point: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "fields": dict(self.fields),
            "target": self.target,
            "choices": list(self.choices),
            "cluster": self.cluster,
            "tests": self.tests,
            "entry_point": self.entry_point,
        }


@dataclass(frozen=True)
class Sampling:
    """The solver's generation parameters (greedy only: temperature 0)."""

    max_tokens: int = 64
    stop: tuple[str, ...] = ()
    chat: bool = False  # send the prompt as one user turn through the model's chat template

    def as_json(self) -> dict[str, Any]:
        shape = {"max_tokens": self.max_tokens, "stop": list(self.stop), "temperature": 0.0}
        return {**shape, "chat": True} if self.chat else shape


@dataclass(frozen=True)
class Task:
    """A registered evaluation task. `load` returns its items (deterministically)."""

    name: str
    version: str
    kind: Kind
    template: str
    scorer: str
    load: Callable[[], Sequence[Item]] = field(compare=False, repr=False)
    fewshot: tuple[Item, ...] = ()
    sampling: Sampling = Sampling()
    judge_version: str = "1"
    clustered: bool = False  # the items declare clusters: standard errors are clustered
    fewshot_separator: str = "\n\n"

    def __post_init__(self) -> None:
        if not TASK_NAME.fullmatch(self.name):
            raise InvalidInput(
                f"task name {self.name!r}: use 1-64 lower-case letters, digits and '_.-'"
            )
        if self.kind not in KINDS:
            raise InvalidInput(f"task {self.name}: kind {self.kind!r} is not one of {KINDS}")
        if self.scorer not in SCORERS:
            raise InvalidInput(f"task {self.name}: scorer {self.scorer!r} is not one of {SCORERS}")

    @property
    def template_hash(self) -> str:
        return sha256_hex(self.template.encode())[:16]

    @property
    def fewshot_hash(self) -> str:
        shots = [shot.as_json() for shot in self.fewshot]
        return sha256_hex(canonical_json([shots, self.fewshot_separator]))[:16]

    def render(self, item: Item) -> str:
        """The prompt for `item`: the few-shot examples (each with its answer), then the item."""
        shots = [render(self.template, s.fields) + " " + answer_text(s) for s in self.fewshot]
        return self.fewshot_separator.join([*shots, render(self.template, item.fields)])


def answer_text(item: Item) -> str:
    if item.choices and isinstance(item.target, int):
        return item.choices[item.target]
    return str(item.target)


def render(template: str, fields: Mapping[str, str]) -> str:
    """`{name}` placeholders filled from `fields` and nothing else: no attribute access or format
    specs, so a template from a task file cannot reach into the process."""

    def fill(match: "re.Match[str]") -> str:
        name = match.group(1)
        if name not in fields:
            raise InvalidInput(f"template field {{{name}}} is not among the item's fields")
        return fields[name]

    return _FIELD.sub(fill, template)


_REGISTRY: dict[str, Task] = {}


def register(task: Task) -> Task:
    """Add `task` to the registry; the same name with a different definition is refused."""
    known = _REGISTRY.get(task.name)
    if known is not None and known != task:
        raise InvalidInput(f"task {task.name!r} is already registered with another definition")
    _REGISTRY[task.name] = task
    return task


def get_task(name: str) -> Task:
    """A registered task by name, or a local JSONL task (`jsonl:PATH`, see `load_jsonl_task`)."""
    if name.startswith("jsonl:"):
        from shipyard.evals.jsonl import load_jsonl_task

        return load_jsonl_task(name[len("jsonl:") :])  # named by its path, not registered
    _load_builtins()
    task = _REGISTRY.get(name)
    if task is None:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise NotFound(f"no eval task named {name!r} (registered: {known})")
    return task


def registered() -> list[Task]:
    _load_builtins()
    return [_REGISTRY[name] for name in sorted(_REGISTRY)]


def _load_builtins() -> None:
    import shipyard.evals.builtin  # noqa: F401  (registers on import)
