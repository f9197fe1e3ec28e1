"""One scheduling pass: (cluster, queue, now) → admissions and preemptions.

The same code drives the simulator and the live service. A pass walks the queue in policy order
twice: first admitting only jobs that fit their team's nominal quota (these may reclaim borrowed
GPUs by preemption), then jobs that must borrow. The first job that fits quota but not the nodes
gets a reservation: the nodes it will get when running jobs reach their time limits. Later jobs
start only if they end before that shadow time or avoid the reserved nodes (EASY backfill), so a
reservation is never delayed.
"""

import bisect
import collections
from collections.abc import Iterator
from dataclasses import dataclass, field

from shipyard.errors import InvalidInput
from shipyard.scheduler.cluster import ClusterState
from shipyard.scheduler.model import PRIORITY_CLASSES, Job, Running, Tier
from shipyard.scheduler.preemption import choose_victims
from shipyard.scheduler.quota import Fit
from shipyard.scheduler.reservation import Reservation, reserve

ORDERS = ("fifo", "sjf", "priority")


@dataclass(frozen=True)
class PolicyConfig:
    order: str = "priority"  # fifo: submit time; sjf/priority: declared time limit first
    strict: bool = False  # stop at the first job that cannot start (no skipping ahead)
    backfill: bool = True  # reserve for the first blocked job, backfill around it
    borrowing: bool = True
    preemption: bool = True
    preemption_budget: int = 16  # victims allowed per window
    preemption_window: float = 600.0
    max_preemptions_per_job: int = 2
    preemption_attempts_per_pass: int = 4
    # priority class → tier name (production, guaranteed, interactive, scavenger)
    priority_classes: dict[str, str] = field(default_factory=lambda: dict(PRIORITY_CLASSES))

    def __post_init__(self) -> None:
        tiers = ("production", "guaranteed", "interactive", "scavenger")
        for name, tier in self.priority_classes.items():
            if tier not in tiers:
                known = ", ".join(tiers)
                raise InvalidInput(f"policy: class {name!r} maps to {tier!r} (allowed: {known})")
        if self.order not in ORDERS:
            allowed = ", ".join(ORDERS)
            raise InvalidInput(f"policy order {self.order!r} unknown (allowed: {allowed})")
        if self.preemption_budget < 0 or self.max_preemptions_per_job < 0:
            raise InvalidInput("policy: preemption limits must be ≥ 0")

    def may_borrow(self, job: Job) -> bool:
        # Borrowed GPUs must be reclaimable: only preemptible jobs borrow, and a job preempted
        # too often stops borrowing, so it can never be a reclaim victim again (no loops).
        return self.borrowing and job.preemptible and job.preemptions < self.max_preemptions_per_job

    def tier_of(self, job: Job) -> Tier:
        """The tier a job's priority class gives it within its team's nominal quota."""
        tier = self.priority_classes.get(job.priority)
        if tier is None:
            allowed = ", ".join(self.priority_classes)
            raise InvalidInput(f"job {job.id!r}: priority {job.priority!r} unknown ({allowed})")
        return Tier[tier.upper()]


@dataclass
class Decision:
    admitted: list[Running] = field(default_factory=list)
    preempted: list[tuple[Running, str]] = field(default_factory=list)  # (victim, preemptor id)
    reservation: Reservation | None = None


class JobQueue:
    """Pending jobs kept in policy order (insertion is O(log n) search + list insert)."""

    def __init__(self, config: PolicyConfig) -> None:
        self._config = config
        self._items: list[tuple[tuple[float, ...], int, Job]] = []
        self._seq = 0

    def key(self, job: Job) -> tuple[float, ...]:
        tier = self._config.tier_of(job)
        if self._config.order == "fifo":
            return (tier, job.submit_time)
        return (tier, job.time_limit, job.submit_time)

    def add(self, job: Job) -> None:
        self._seq += 1
        bisect.insort(self._items, (self.key(job), self._seq, job), key=lambda t: t[:2])

    def remove(self, ids: set[str]) -> None:
        if ids:
            self._items = [item for item in self._items if item[2].id not in ids]

    def __iter__(self) -> Iterator[Job]:
        return (item[2] for item in self._items)

    def __len__(self) -> int:
        return len(self._items)


class Policy:
    def __init__(self, config: PolicyConfig | None = None) -> None:
        self.config = config or PolicyConfig()
        self._recent: collections.deque[float] = collections.deque()

    def schedule(self, state: ClusterState, queue: JobQueue, now: float) -> Decision:
        cfg = self.config
        decision = Decision()
        while self._recent and self._recent[0] <= now - cfg.preemption_window:
            self._recent.popleft()
        free_total = {t: state.free_gpus(t) for t in state.gpu_types}
        failed: set[tuple[object, ...]] = set()
        taken: set[str] = set()
        tried: set[str] = set()
        attempts = cfg.preemption_attempts_per_pass if cfg.preemption else 0
        reserved = False
        # Smallest request per (team, type) refused by quota in this pass: larger ones are too
        # (usage only grows during a pass, except by preemption, which clears this).
        refused: dict[tuple[str, str], int] = {}
        for nominal_only in (True, False) if cfg.borrowing else (True,):
            for job in queue:
                if job.id in taken or (not nominal_only and job.id in tried):
                    continue
                if not state.fits_idle(job):
                    continue  # inadmissible: it must not hold the reservation or the line
                stuck = not attempts and not any(free_total.values())
                if stuck and (reserved or not cfg.backfill):
                    return decision  # nothing can start, and nothing is left to reserve
                key = (job.team, job.gpu_type)
                if job.gpus >= refused.get(key, job.gpus + 1):
                    fit = Fit.NONE
                else:
                    fit = state.quota.check(job.team, job.gpu_type, job.gpus)
                    if fit is Fit.NONE:
                        refused[key] = job.gpus
                entitled = fit in (Fit.NOMINAL, Fit.RECLAIM)
                if fit is Fit.NONE:
                    # A job within its nominal, waiting for its team's own jobs to end, is
                    # blocked like one that does not fit the nodes: it may take the reservation.
                    may_block = cfg.strict or (cfg.backfill and not reserved)
                    if not (nominal_only and may_block and self._waits_for_quota(state, job)):
                        continue
                elif nominal_only and not entitled:
                    continue
                if fit is Fit.BORROW and not cfg.may_borrow(job):
                    continue
                declared = cfg.tier_of(job)
                tier = declared if entitled else max(declared, Tier.BORROWED)
                if nominal_only:
                    tried.add(job.id)  # placement only gets harder within a pass
                run = None
                if fit in (Fit.NOMINAL, Fit.BORROW):
                    reservation = decision.reservation
                    run = self._try_place(state, job, tier, now, reservation, failed, free_total)
                if run is None and entitled and attempts > 0 and declared <= Tier.GUARANTEED:
                    attempts -= 1
                    run = self._try_preempt(state, job, tier, now, decision)
                    if run is not None:
                        free_total[job.gpu_type] = state.free_gpus(job.gpu_type)
                        refused.clear()
                if run is not None:
                    taken.add(job.id)
                    decision.admitted.append(run)
                    continue
                if cfg.strict:
                    return decision
                if cfg.backfill and not reserved:
                    reserved = True
                    decision.reservation = reserve(state, job, now)
        return decision

    @staticmethod
    def _waits_for_quota(state: ClusterState, job: Job) -> bool:
        return job.gpus <= state.quota.nominal(job.team, job.gpu_type)

    def _try_place(
        self,
        state: ClusterState,
        job: Job,
        tier: Tier,
        now: float,
        reservation: Reservation | None,
        failed: set[tuple[object, ...]],
        free_total: dict[str, int],
    ) -> Running | None:
        if free_total.get(job.gpu_type, 0) < job.gpus:
            return None
        avoid = reservation is not None and now + job.time_limit > reservation.start
        shape = (job.gpus, job.gpus_per_node, job.gpu_type, job.topology, avoid)
        if shape in failed:
            return None
        exclude = set(reservation.nodes) if avoid and reservation is not None else None
        alloc = state.place(job, exclude=exclude)
        if alloc is None:
            failed.add(shape)
            return None
        run = Running(job, alloc, tier, start=now)
        state.admit(run)
        free_total[job.gpu_type] -= job.gpus
        return run

    def _try_preempt(
        self, state: ClusterState, job: Job, tier: Tier, now: float, decision: Decision
    ) -> Running | None:
        cfg = self.config
        budget = cfg.preemption_budget - len(self._recent)
        eviction = choose_victims(state, job, tier, now, budget, cfg.max_preemptions_per_job)
        if eviction is None:
            return None
        for victim in eviction.victims:
            state.release(victim.job.id)
        if state.quota.check(job.team, job.gpu_type, job.gpus) is not Fit.NOMINAL:
            for victim in eviction.victims:  # the GPUs fit but the quota would not: undo
                state.admit(victim)
            return None
        grace = 0.0
        for victim in eviction.victims:
            decision.preempted.append((victim, job.id))
            self._recent.append(now)
            grace = max(grace, victim.job.grace)
        # The preemptor owns the GPUs now; it starts once its victims have had their grace.
        run = Running(job, eviction.alloc, tier, start=now + grace)
        state.admit(run)
        return run
