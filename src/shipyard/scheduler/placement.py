"""Physical gang placement: which nodes, and how many GPUs on each, a whole job gets.

A job is placed entirely or not at all; quota alone never admits it. With `gpus_per_node` set,
every node of the gang must have that many free GPUs (so an 8-per-node job never lands on 4 + 4).
Without it, a job that fits one node goes to the node with the fewest free GPUs that still fits
(best fit); a larger one takes k wholly free nodes plus the freest remaining node for the rest.
"""

from collections.abc import Sequence

from shipyard.scheduler.model import Allocation, Job, Node


def fit(
    gpus: int,
    per_node: int | None,
    nodes: Sequence[Node],
    free: Sequence[int],
    cand: Sequence[int],
    capacity: int,
) -> Allocation | None:
    """An allocation of `gpus` over the candidate node indices (`capacity`: the largest node)."""
    if not cand:
        return None
    if per_node is not None:
        eligible = [i for i in cand if free[i] >= per_node]
        count = gpus // per_node
        if len(eligible) < count:
            return None
        eligible.sort(key=free.__getitem__)
        return dict.fromkeys(eligible[:count], per_node)
    if gpus <= capacity:
        return _best_single(gpus, free, cand)
    whole_count, rest = divmod(gpus, capacity)
    whole = [i for i in cand if free[i] == capacity == nodes[i].gpus]
    if len(whole) < whole_count:
        return None
    alloc = dict.fromkeys(whole[:whole_count], capacity)
    if rest:
        freest = -1
        for i in cand:
            if i not in alloc and free[i] >= rest and (freest < 0 or free[i] > free[freest]):
                freest = i
        if freest < 0:
            return None
        alloc[freest] = rest
    return alloc


def _best_single(gpus: int, free: Sequence[int], cand: Sequence[int]) -> Allocation | None:
    best = -1
    for i in cand:
        f = free[i]
        if f >= gpus and (best < 0 or f < free[best]):
            best = i
            if f == gpus:
                break
    return None if best < 0 else {best: gpus}


def place(
    job: Job,
    nodes: Sequence[Node],
    free: Sequence[int],
    cand: Sequence[int],
    groups: Sequence[Sequence[int]],
    capacity: int,
) -> Allocation | None:
    """Place `job` honouring its topology mode; `groups` are its leaves or blocks (candidates)."""
    if job.topology == "any":
        return fit(job.gpus, job.gpus_per_node, nodes, free, cand, capacity)
    options = []
    for members in groups:
        total = sum(free[i] for i in members)
        if total >= job.gpus:
            options.append((total, members))
    # Best fit at group level too: fill the tightest leaf or block that can hold the gang.
    options.sort(key=lambda o: o[0])
    for _, members in options:
        alloc = fit(job.gpus, job.gpus_per_node, nodes, free, members, capacity)
        if alloc is not None:
            return alloc
    if job.topology.startswith("prefer"):
        return fit(job.gpus, job.gpus_per_node, nodes, free, cand, capacity)
    return None
