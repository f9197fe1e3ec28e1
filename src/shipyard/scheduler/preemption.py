"""Checkpoint-aware victim selection.

Only a job that is itself entitled (production, or within its team's nominal quota) may preempt,
and only jobs in a strictly lower tier: scavenger, interactive, or borrowed quota of a team that is
still over its nominal. Candidates are taken lowest tier first, then least lost work (GPUs × time
since the last checkpoint), until the preemptor can be placed physically; then any victim whose
removal was not needed is spared. A job already preempted `max_per_job` times is never a victim
and never borrows again (see the policy), which bounds how often any job can be preempted.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from shipyard.scheduler.cluster import ClusterState
from shipyard.scheduler.model import Allocation, Job, Running, Tier


@dataclass(frozen=True)
class Eviction:
    victims: tuple[Running, ...]
    alloc: Allocation  # where the preemptor goes once the victims are gone


def choose_victims(
    state: ClusterState, job: Job, tier: Tier, now: float, budget: int, max_per_job: int
) -> Eviction | None:
    if budget <= 0:
        return None
    cand = set(state.candidates(job))
    pool = [
        run
        for run in state.running.values()
        if run.job.preemptible
        and run.tier > tier
        and run.job.gpu_type == job.gpu_type
        and run.job.preemptions < max_per_job
        and not cand.isdisjoint(run.alloc)
    ]
    pool.sort(key=lambda r: (-r.tier, r.lost_work(now), -r.start))
    free = list(state.free)
    chosen: list[Running] = []
    over = _over_nominal(state, job)
    alloc = None
    for run in pool:
        if run.tier == Tier.BORROWED and over.get(run.job.team, 0) <= 0:
            continue  # that team is back within its nominal: its jobs are not borrowing now
        chosen.append(run)
        over[run.job.team] = over.get(run.job.team, 0) - run.job.gpus
        _shift(free, run.alloc, +1)
        alloc = state.place(job, free)
        if alloc is not None:
            break
    if alloc is None:
        return None
    kept = _spare_unneeded(state, job, free, chosen, now)
    if len(kept) > budget:
        return None
    final = state.place(job, _freed(state.free, kept))
    assert final is not None  # the pruning kept a placeable set
    return Eviction(tuple(kept), final)


def _over_nominal(state: ClusterState, job: Job) -> dict[str, int]:
    quota = state.quota
    return {team: quota.borrowing(team, job.gpu_type) for team in quota.teams}


def _spare_unneeded(
    state: ClusterState, job: Job, free: list[int], chosen: list[Running], now: float
) -> list[Running]:
    """Drop victims, most lost work first, whose GPUs the preemptor does not need."""
    kept = list(chosen)
    for run in sorted(chosen, key=lambda r: -r.lost_work(now)):
        _shift(free, run.alloc, -1)
        if state.place(job, free) is None:
            _shift(free, run.alloc, +1)
        else:
            kept.remove(run)
    return kept


def _freed(free: Sequence[int], runs: Sequence[Running]) -> list[int]:
    out = list(free)
    for run in runs:
        _shift(out, run.alloc, +1)
    return out


def _shift(free: list[int], alloc: Allocation, sign: int) -> None:
    for i, gpus in alloc.items():
        free[i] += sign * gpus
