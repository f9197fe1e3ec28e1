"""Reservations for a blocked gang: when and where it could start if nothing else started.

Running jobs are assumed to run to their declared time limit (the only duration the policy
sees). Releasing them in order of expected end only ever frees GPUs, so "can the job be placed
once the first m jobs have ended" is monotone in m and a binary search finds the earliest m.
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
    releases = sorted(
        ((run.expected_end, run.alloc) for run in state.running.values()),
        key=lambda item: item[0],
    )

    def placed_after(count: int) -> Allocation | None:
        free = list(state.free)
        for _, alloc in releases[:count]:
            for i, gpus in alloc.items():
                free[i] += gpus
        return state.place(job, free)

    final = placed_after(len(releases))
    if final is None:
        return None
    lo, hi = 0, len(releases)
    found = final
    while lo < hi:
        mid = (lo + hi) // 2
        alloc = placed_after(mid)
        if alloc is None:
            lo = mid + 1
        else:
            hi, found = mid, alloc
    start = max(now, releases[lo - 1][0]) if lo > 0 else now
    return Reservation(job.id, start, frozenset(found))
