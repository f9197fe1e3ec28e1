"""The regression gate: may a candidate model replace a baseline? One paired rule, read from the
eval platform's stored results, shared by canary rollouts and the trainer's promotion.

    plan_gate(queue, [candidate, baseline], tasks)        # enqueue both models' runs
    ...                                                    # workers work them (or `evaluate`)
    decision = judge(ResultStore(queue.db), candidate, baseline, tasks, max_drop=0.02)

For each task, both models' runs (same items, template, few-shot set, sampling, harness) must be
complete: every item scored under the task's current judge. The paired difference
delta = candidate - baseline over the items (its standard error clustered when the task's items
declare clusters) fails the task when

    delta.mean + z * delta.se < -max_drop

that is, when the candidate is worse by more than `max_drop` beyond the error margin. Where the
standard error is undefined (one item, or one cluster) the margin is taken as 0: the mean alone
decides. Identical answers give delta = 0 and always pass. The gate passes when every task does.
"""

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from shipyard.errors import InvalidInput, NotFound
from shipyard.evals.report import RunScores, dead_items, run_scores
from shipyard.evals.runner import plan, queue_name, work
from shipyard.evals.stats import Estimate, estimate, paired
from shipyard.evals.store import ResultStore, RunKey
from shipyard.evals.tasks import get_task
from shipyard.queue import Queue
from shipyard.workspace import Workspace


@dataclass(frozen=True)
class TaskVerdict:
    task: str
    candidate: Estimate
    baseline: Estimate
    delta: Estimate  # candidate - baseline, paired on the same items
    passed: bool

    def as_json(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "candidate": self.candidate.as_json(),
            "baseline": self.baseline.as_json(),
            "delta": self.delta.as_json(),
            "passed": self.passed,
        }


@dataclass(frozen=True)
class GateDecision:
    passed: bool
    verdicts: tuple[TaskVerdict, ...]
    reason: str

    def as_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "reason": self.reason,
            "verdicts": [v.as_json() for v in self.verdicts],
        }


def judge(
    store: ResultStore,
    candidate: str,
    baseline: str,
    tasks: Sequence[str],
    max_drop: float = 0.0,
    z: float = 1.96,
) -> GateDecision:
    """The gate's decision on `candidate` vs `baseline` (model artifact ids) over `tasks` (task
    refs), from their complete stored runs. A missing run raises `NotFound`, an incomplete one
    (items unscored or dead in the queue) `InvalidInput`, each naming the run."""
    if not tasks:
        raise InvalidInput("the gate needs at least one task")
    if not (math.isfinite(max_drop) and max_drop >= 0 and math.isfinite(z) and z >= 0):
        raise InvalidInput(f"gate max_drop {max_drop} and z {z}: each a finite number >= 0")
    verdicts = []
    for ref in tasks:
        cand_run = _complete_run(store, candidate, ref)
        base_run = _complete_run(store, baseline, ref)
        cand, base = run_scores(store, cand_run), run_scores(store, base_run)
        delta = paired(cand.by_item, base.by_item, cand.clusters)
        if delta.n == 0:
            raise InvalidInput(f"gate task {ref}: the two runs share no scored item")
        margin = z * delta.se if math.isfinite(delta.se) else 0.0
        verdicts.append(
            TaskVerdict(
                str(cand_run["task"]),
                _mean(cand),
                _mean(base),
                delta,
                passed=delta.mean + margin >= -max_drop,
            )
        )
    failed = [v for v in verdicts if not v.passed]
    return GateDecision(not failed, tuple(verdicts), _reason(failed, verdicts, max_drop, z))


def plan_gate(queue: Queue, models: Sequence[str], tasks: Sequence[str]) -> None:
    """Enqueue each model's runs of `tasks` (idempotent: done items are not enqueued again)."""
    for model in dict.fromkeys(models):
        plan(queue, model, tasks)


def pending(queue: Queue, model_id: str) -> bool:
    """Whether `model_id`'s eval queue holds items to claim (now or later) or claimed."""
    try:
        (stats,) = queue.stats(queue_name(model_id))
    except NotFound:
        return False
    return bool(stats.ready or stats.waiting or stats.leased)


def rescore(store: ResultStore, model_id: str, tasks: Sequence[str]) -> None:
    """Score stored outputs under each task's current judge (a new scorer since they ran)."""
    for ref in tasks:
        task = get_task(ref)
        run_key = RunKey.of(model_id, task).hash
        store.rescore(task, run_key)


def evaluate(
    queue: Queue,
    workspace: Workspace,
    candidate: str,
    baseline: str,
    tasks: Sequence[str],
    max_drop: float = 0.0,
    z: float = 1.96,
    note: Callable[[str], None] = lambda _: None,
) -> GateDecision:
    """Plan both models' runs, work them in this process (one warm engine per model; runs done
    before cost nothing), and judge."""
    plan_gate(queue, [candidate, baseline], tasks)
    store = ResultStore(queue.db)
    for model in dict.fromkeys([candidate, baseline]):
        if pending(queue, model):
            work(queue, workspace, model, note=note)
        rescore(store, model, tasks)
    return judge(store, candidate, baseline, tasks, max_drop, z)


def _complete_run(store: ResultStore, model_id: str, ref: str) -> dict[str, Any]:
    task = get_task(ref)
    run_key = RunKey.of(model_id, task).hash
    try:
        run = store.run(run_key)
    except NotFound:
        raise NotFound(
            f"gate task {ref}: no eval run for model {model_id[:16]} (run {run_key}); "
            f"plan it with `shipyard eval run {model_id[:16]} {ref}`"
        ) from None
    scored = len(run_scores(store, run).rows)
    if scored < int(run["items"]):
        dead = len(dead_items(Queue(store.db), run))
        raise InvalidInput(
            f"gate task {ref}: run {run_key} of model {model_id[:16]} is not complete: "
            f"{scored} of {run['items']} items scored"
            + (f", {dead} dead in queue {queue_name(model_id)}" if dead else "")
        )
    return run


def _mean(scores: RunScores) -> Estimate:
    clusters = [r.cluster for r in scores.rows] if scores.clustered else None
    return estimate([r.score for r in scores.rows], clusters)


def _reason(
    failed: list[TaskVerdict], verdicts: list[TaskVerdict], max_drop: float, z: float
) -> str:
    rule = f"delta + {z:g}*SE < -{max_drop:g}"
    if not failed:
        return f"every task passed ({len(verdicts)}; fails when {rule})"
    parts = [
        f"{v.task} {v.candidate.mean:.4f} vs {v.baseline.mean:.4f}, "
        f"delta {v.delta.mean:+.4f} (SE {_se(v.delta)}, n {v.delta.n})"
        for v in failed
    ]
    return f"candidate worse ({rule}) on " + "; ".join(parts)


def _se(est: Estimate) -> str:
    return f"{est.se:.4f}" if math.isfinite(est.se) else "undefined"
