"""Reservations for a blocked gang: when and where it could start if nothing else started.

Running jobs are assumed to run to their declared time limit (the only duration the policy
sees). They are released in order of expected end; the first moment the job can be placed on the
freed GPUs is the shadow time, and the nodes it would get there are reserved.
"""

from dataclasses import dataclass

from shipyard.scheduler.cluster import ClusterState
from shipyard.scheduler.model import Allocation, Job


@dataclass(frozen=True)
class Reservation:
    job_id: str
    start: float  # the shadow time: when the reserved nodes are expected to hold the gang
    nodes: frozenset[int]

    def allows(self, now: float, time_limit: float, alloc: Allocation) -> bool:
        """A backfill candidate may start if it ends before the shadow time or avoids the nodes."""
        return now + time_limit <= self.start or self.nodes.isdisjoint(alloc)


def reserve(state: ClusterState, job: Job, now: float) -> Reservation | None:
    """The earliest reservation for `job`, or None if it cannot fit even on an empty cluster."""
    alloc = state.place(job)
    if alloc is not None:
        return Reservation(job.id, now, frozenset(alloc))
    releases = sorted(
        [(run.start + run.job.time_limit, id(run), run.alloc) for run in state.running.values()]
    )
    capacity = max((n.gpus for n in state.nodes), default=0)
    need = job.gpus_per_node or min(job.gpus, capacity)
    free = list(state.free)
    for end, _, freed in releases:
        crossed = False
        for i, gpus in freed.items():
            free[i] += gpus
            crossed = crossed or free[i] >= need
        # Feasibility can only change when some node reaches the per-node amount the job needs.
        if crossed:
            alloc = state.place(job, free)
            if alloc is not None:
                return Reservation(job.id, max(now, end), frozenset(alloc))
    return None
