"""When to evaluate: a per-run policy over checkpoint commits and alias moves.

Every new checkpoint (or model alias move) gets the fast tier; every Nth one on the same source,
and every promotion candidate, also gets the full tier. The trainer's checkpoint commit calls
`on_checkpoint`; `shipyard eval watch ALIAS` calls it for each move of an alias. A checkpoint
seen before on a source is never enqueued again (recorded in the database).
"""

import time
from collections.abc import Callable
from dataclasses import dataclass

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
) -> list[Planned]:
    """Enqueue the tiers `policy` picks for a new checkpoint of `source` (a run, an alias);
    nothing if this checkpoint was seen on `source` before."""
    store = ResultStore(queue.db)
    tiers = store.add_trigger(source, model_id, lambda n: policy.tiers(n, promotion_candidate))
    if tiers is None:
        return []
    return plan(queue, model_id, policy.tasks(tiers))


def watch(
    workspace: Workspace,
    queue: Queue,
    alias: str,
    policy: TriggerPolicy,
    interval: float = 5.0,
    should_stop: Callable[[], bool] = lambda: False,
    note: Callable[[str], None] = print,
) -> None:
    """Poll `alias` and trigger each artifact it has pointed at, oldest move first."""
    source = f"alias:{alias}"
    while not should_stop():
        for event in workspace.catalog.alias_history(alias):
            for planned in on_checkpoint(queue, policy, source, event.new_id):
                note(f"{event.new_id[:16]} {planned.task}: {planned.enqueued} items enqueued")
        time.sleep(interval)
