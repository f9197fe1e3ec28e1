"""When to evaluate: a per-run policy over checkpoint commits and alias moves.

Every new checkpoint (or model alias move) gets the fast tier; every Nth one on the same source,
and every promotion candidate, also gets the full tier. A training run's lifecycle agent calls
`trigger_commit` for each committed checkpoint; `shipyard eval watch ALIAS` calls `on_checkpoint`
for each move of an alias. The tiers picked for a checkpoint on a source are recorded in the
database once, so it is never enqueued for other tiers, nor its items twice. A committed trainer
checkpoint is imported as a model first.
"""

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from shipyard.errors import InvalidInput
from shipyard.evals.runner import Planned, plan
from shipyard.evals.store import ResultStore
from shipyard.queue import Queue
from shipyard.workspace import Workspace


@dataclass(frozen=True)
class TriggerPolicy:
    fast: tuple[str, ...] = ("arith-mc",)
    full: tuple[str, ...] = ("arith-mc", "arith-gen", "rg-basic-arithmetic", "humaneval")
    full_every: int = 5  # the full tier on every Nth checkpoint of a source

    def __post_init__(self) -> None:
        if not self.fast:
            raise InvalidInput("policy.fast: name at least one task")
        if self.full_every < 1:
            raise InvalidInput(f"policy.full_every must be at least 1, not {self.full_every}")

    def tiers(self, ordinal: int, promotion_candidate: bool = False) -> list[str]:
        """The tiers for the `ordinal`-th (1-based) checkpoint of a source."""
        full = promotion_candidate or ordinal % self.full_every == 0
        return ["fast", "full"] if full else ["fast"]

    def tasks(self, tiers: list[str]) -> list[str]:
        chosen = [*self.fast, *(self.full if "full" in tiers else ())]
        return list(dict.fromkeys(chosen))  # each once, in order


def on_checkpoint(
    queue: Queue,
    policy: TriggerPolicy,
    source: str,
    model_id: str,
    promotion_candidate: bool = False,
    seen_as: str | None = None,
) -> list[Planned]:
    """Enqueue the tiers `policy` picks for a new checkpoint of `source` (a run, an alias);
    nothing if this checkpoint (`seen_as`, default the model id) was seen on `source` before."""
    store = ResultStore(queue.db)
    decide = lambda n: policy.tiers(n, promotion_candidate)  # noqa: E731
    tiers = store.add_trigger(source, seen_as or model_id, decide)
    if tiers is None:
        return []
    return plan(queue, model_id, policy.tasks(tiers))


@dataclass(frozen=True)
class Triggered:
    model_id: str  # the checkpoint imported as a model
    tasks: list[str]  # the tasks of the tiers picked for it
    planned: list[Planned]


def trigger_commit(
    queue: Queue,
    workspace: Workspace,
    policy: TriggerPolicy,
    checkpoint: str,
    tokenizer: Path | None,
    source: str,
    n_heads: int | None = None,
    promotion_candidate: bool = False,
) -> Triggered:
    """Import a committed trainer checkpoint (an artifact ref) as a model and enqueue the tiers
    picked for it on `source`; a checkpoint seen there before keeps the tiers recorded then.
    Calling it again enqueues nothing twice (the import is content-addressed, a plan keyed by
    item), so a caller that died between the two steps simply calls it again. `tokenizer`: the
    data's, for a GPT checkpoint; None for a Hugging Face run's (its base model carries one)."""
    from shipyard.serve.model_import import import_trainer_model

    checkpoint_id = workspace.resolve(checkpoint)
    model = import_trainer_model(workspace, checkpoint_id, None, tokenizer, n_heads)
    store = ResultStore(queue.db)
    tiers = store.add_trigger(source, checkpoint_id, lambda n: policy.tiers(n, promotion_candidate))
    if tiers is None:
        rows = store.db.rows(
            "SELECT tiers FROM eval_triggers WHERE source = ? AND artifact_id = ?",
            (source, checkpoint_id),
        )
        tiers = [str(t) for t in json.loads(rows[0][0])]
    tasks = policy.tasks(tiers)
    return Triggered(model.id, tasks, plan(queue, model.id, tasks))


def on_checkpoint_commit(
    queue: Queue,
    workspace: Workspace,
    policy: TriggerPolicy,
    checkpoint: str,
    tokenizer: Path | None,
    source: str,
    promotion_candidate: bool = False,
    n_heads: int | None = None,
) -> list[Planned]:
    """For a committed trainer checkpoint (an artifact ref) not seen on `source` before: import
    it as a model (once: the import is content-addressed) and enqueue the tiers `policy` picks."""
    checkpoint_id = workspace.resolve(checkpoint)
    if ResultStore(queue.db).seen_trigger(source, checkpoint_id):
        return []
    found = trigger_commit(
        queue, workspace, policy, checkpoint_id, tokenizer, source, n_heads, promotion_candidate
    )
    return found.planned


def watch(
    workspace: Workspace,
    queue: Queue,
    alias: str,
    policy: TriggerPolicy,
    interval: float = 5.0,
    should_stop: Callable[[], bool] = lambda: False,
    note: Callable[[str], None] = print,
    tokenizer: Path | None = None,
    n_heads: int | None = None,
) -> None:
    """Poll `alias` and trigger each artifact it has pointed at, oldest move first: a model as
    it is, a trainer checkpoint imported first (with `tokenizer`, and `n_heads` where the
    checkpoint does not record it)."""
    source = f"alias:{alias}"
    store = ResultStore(queue.db)
    while not should_stop():
        for event in workspace.catalog.alias_history(alias):
            if store.seen_trigger(source, event.new_id):
                continue
            if workspace.manifest(event.new_id).kind == "checkpoint":
                if tokenizer is None:
                    raise InvalidInput(f"{alias} points at checkpoints: give the tokenizer")
                planned = on_checkpoint_commit(
                    queue, workspace, policy, event.new_id, tokenizer, source, n_heads=n_heads
                )
            else:
                planned = on_checkpoint(queue, policy, source, event.new_id)
            for p in planned:
                note(f"{event.new_id[:16]} {p.task}: {p.enqueued} items enqueued")
        time.sleep(interval)
