"""Why a queued job waits, as Kueue-style conditions a user can act on.

- `Inadmissible`: the job can never start as asked: the healthy nodes could not hold its shape
  even if idle (this covers asking for more GPUs than the cluster has), or it asks for more
  than its team may ever use. It stays queued (a node may come back) but never takes the
  backfill reservation.
- `Pending`: it could start, but not now; the message names what it waits for.
- `Admitted`: it was given GPUs (it may still wait for the jobs it preempted to exit).

Pending messages are worked out on the cluster as a scheduling pass left it.
"""

from dataclasses import dataclass

from shipyard.scheduler.cluster import ClusterState
from shipyard.scheduler.model import Job
from shipyard.scheduler.policy import PolicyConfig
from shipyard.scheduler.quota import Fit
from shipyard.scheduler.reservation import Reservation

INADMISSIBLE = "Inadmissible"
PENDING = "Pending"
ADMITTED = "Admitted"


@dataclass(frozen=True)
class Condition:
    reason: str  # INADMISSIBLE, PENDING or ADMITTED
    message: str

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


def inadmissible(state: ClusterState, job: Job, config: PolicyConfig) -> Condition | None:
    """The reason `job` can never start as asked, or None if it could some day."""
    why = _no_shape(state, job) or _over_quota(state, job, config)
    return None if why is None else Condition(INADMISSIBLE, why)


class Explainer:
    """Conditions for the jobs a pass left queued; placements are tried once per shape."""

    def __init__(
        self,
        state: ClusterState,
        config: PolicyConfig,
        reservation: Reservation | None,
        now: float,
    ) -> None:
        self.state = state
        self.config = config
        self.reservation = reservation
        self.now = now
        self._placeable: dict[tuple[object, ...], bool] = {}

    def __call__(self, job: Job) -> Condition:
        never = inadmissible(self.state, job, self.config)
        return never or Condition(PENDING, self._waiting(job))

    def _waiting(self, job: Job) -> str:
        state, quota = self.state, self.state.quota
        used = quota.used(job.team, job.gpu_type)
        nominal = quota.nominal(job.team, job.gpu_type)
        asks = f"team {job.team} uses {used} of its {nominal}, asks {job.gpus}"
        fit = quota.check(job.team, job.gpu_type, job.gpus)
        if fit is Fit.BORROW and not self.config.may_borrow(job):
            return f"waiting for quota ({asks})"
        if fit is Fit.NONE:
            return f"waiting for quota to borrow: the cohort has none free ({asks})"
        if fit is Fit.RECLAIM:
            return f"waiting to reclaim quota lent to other teams ({asks})"
        free = sum(state.free[i] for i in state.candidates(job))
        held = self.reservation is not None and self.reservation.job_id == job.id
        line = "; next in line, nodes are reserved for it" if held else ""
        if free < job.gpus:
            return f"waiting for {job.gpus - free} GPUs (asks {job.gpus}, {free} free){line}"
        if not self._places(job, avoid=False):
            return f"waiting for a placement: {free} GPUs free, not as {_shape(job)}{line}"
        res = self.reservation
        late = res is not None and not held and self.now + job.time_limit > res.start
        if res is not None and late and not self._places(job, avoid=True):
            return f"would delay job {res.job_id}, which holds the reservation"
        return "waiting for its turn behind jobs ahead of it in the queue"

    def _places(self, job: Job, avoid: bool) -> bool:
        key = (job.gpus, job.gpus_per_node, job.gpu_type, job.topology, avoid)
        found = self._placeable.get(key)
        if found is None:
            exclude = set(self.reservation.nodes) if avoid and self.reservation else None
            found = self.state.place(job, exclude=exclude) is not None
            self._placeable[key] = found
        return found


def _no_shape(state: ClusterState, job: Job) -> str | None:
    if state.fits_idle(job):
        return None
    typed = [i for i, n in enumerate(state.nodes) if n.gpu_type == job.gpu_type]
    if not typed:
        return f"no node has GPU type {job.gpu_type!r}"
    healthy = sum(state.nodes[i].gpus for i in typed if state.node_state[i] == "up")
    if job.gpus > healthy:
        return f"asks {job.gpus} GPUs, the cluster has {healthy} healthy {job.gpu_type!r} GPUs"
    return f"no node shape fits ({_shape(job)})"


def _over_quota(state: ClusterState, job: Job, config: PolicyConfig) -> str | None:
    quota = state.quota
    nominal = quota.nominal(job.team, job.gpu_type)
    if job.gpus <= nominal:
        return None
    asks = f"asks {job.gpus}, quota {nominal}"
    if not config.may_borrow(job):
        if not config.borrowing:
            why = "borrowing is off"
        elif not job.preemptible:
            why = "non-preemptible"
        else:
            why = f"preempted {job.preemptions} times, so it borrows no more"
        return f"exceeds team quota ({asks}, {why})"
    if quota.quota(job.team).cohort is None:
        return f"exceeds team quota ({asks}, no cohort to borrow from)"
    ceiling = quota.ceiling(job.team, job.gpu_type)
    if job.gpus > ceiling:
        return f"exceeds team quota ({asks}, at most {ceiling} with borrowing)"
    return None


def _shape(job: Job) -> str:
    text = f"{job.gpus} GPUs"
    if job.gpus_per_node is not None:
        count = job.gpus // job.gpus_per_node
        text += f" as {count} node{'s' if count > 1 else ''} × {job.gpus_per_node}"
    if job.topology != "any":
        text += f", {job.topology}"
    return text
