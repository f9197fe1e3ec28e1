"""The live scheduler: the unchanged policy, the job store and a backend, in one loop.

Each tick: collect ended processes, stop cancelled and over-time jobs, reap idle interactive
jobs, pick up new submissions, run one policy pass, signal victims, launch admitted gangs and
record why each job still queued waits (its condition, written only when it changes).
A preemptor is launched only after its victims' processes have exited (SIGTERM, then SIGKILL at
the end of their grace), so two jobs never share a GPU id.
"""

import collections
import json
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO

from prometheus_client import CollectorRegistry, generate_latest

from shipyard.errors import InvalidInput, ShipyardError
from shipyard.prometheus import Families, Sample, snapshot_registry
from shipyard.scheduler.backend import Backend
from shipyard.scheduler.cluster import ClusterState
from shipyard.scheduler.conditions import ADMITTED, Condition, Explainer
from shipyard.scheduler.config import ClusterConfig
from shipyard.scheduler.model import Job, Running, Tier
from shipyard.scheduler.policy import JobQueue, Policy
from shipyard.scheduler.store import JobStore

GANG_SHAPES = (1, 2, 4, 8)  # GPUs per node that /status reports the largest gang for


@dataclass
class _Pending:
    run: Running
    victims: list[str]


@dataclass
class Service:
    config: ClusterConfig
    store: JobStore
    backend: Backend
    clock: Callable[[], float] = time.time
    state: ClusterState = field(init=False)
    policy: Policy = field(init=False)
    queue: JobQueue = field(init=False)
    registry: CollectorRegistry = field(init=False)
    _queued: set[str] = field(default_factory=set)
    _pending: dict[str, _Pending] = field(default_factory=dict)
    _stopping: dict[str, str] = field(default_factory=dict)  # job id → state once it has exited
    _reports: dict[str, float] = field(default_factory=dict)  # last utilization report
    _warned: set[str] = field(default_factory=set)
    _conditions: dict[str, str] = field(default_factory=dict)  # job id → condition last written
    charged: dict[tuple[str, str], float] = field(default_factory=dict)  # GPU-seconds held
    counts: collections.Counter[str] = field(default_factory=collections.Counter)
    passes: int = 0  # policy passes run: a client can wait for the scheduler to have looked
    log: TextIO = sys.stderr  # one JSON object per decision (structured log)

    def __post_init__(self) -> None:
        self.state = ClusterState(self.config.nodes, self.config.teams)
        self.policy = Policy(self.config.policy)
        self.queue = JobQueue(self.config.policy)
        self.registry = snapshot_registry(_FAMILIES, lambda: _samples(self))
        for row in self.store.list("running", "cancelling"):
            # A restarted service cannot adopt processes it did not start: requeue them.
            self.store.update(row["id"], state="queued", message="requeued after restart")

    def report_utilization(self, job_id: str) -> None:
        self._reports[job_id] = self.clock()
        self._warned.discard(job_id)

    def tick(self) -> None:
        now = self.clock()
        for job_id, code in self.backend.poll(now):
            self._ended(job_id, code, now)
        self._stop_requested(now)
        rows = self.store.list("queued")
        gone = self._queued - {row["id"] for row in rows}  # cancelled while queued
        self.queue.remove(gone)
        self._queued -= gone
        for job_id in gone:
            self._conditions.pop(job_id, None)
        for row in rows:
            if row["id"] not in self._queued and row["id"] not in self.state.running:
                self._enqueue(row, now)
        decision = self.policy.schedule(self.state, self.queue, now)
        self.passes += 1
        for victim, by in decision.preempted:
            self._charge(victim, now)
            victim.job.preemptions += 1
            self.store.update(victim.job.id, spec=asdict(victim.job))
            self._event("preempt", victim.job.id, by=by, lost_gpu_seconds=victim.lost_work(now))
            self._stop(victim.job.id, victim.job.grace, now, "queued", f"preempted by {by}")
        for run in decision.admitted:
            victims = [v.job.id for v, by in decision.preempted if by == run.job.id]
            self._pending[run.job.id] = _Pending(run, victims)
            nodes = {self.state.nodes[i].name: k for i, k in run.alloc.items()}
            self._event("admit", run.job.id, tier=run.tier.name.lower(), nodes=nodes)
        self.queue.remove({run.job.id for run in decision.admitted})
        self._queued -= {run.job.id for run in decision.admitted}
        self._launch_ready(now)
        explain = Explainer(self.state, self.config.policy, decision.reservation, now)
        for job in self.queue:
            self._condition(job.id, explain(job), now)
        for job_id, pending in self._pending.items():
            exiting = f"waiting for {len(pending.victims)} preempted job(s) to exit"
            self._condition(job_id, Condition(ADMITTED, exiting), now)

    def _condition(self, job_id: str, condition: Condition, now: float) -> None:
        text = str(condition)
        if self._conditions.get(job_id) != text:
            self._conditions[job_id] = text
            row = {"reason": condition.reason, "message": condition.message, "since": now}
            self.store.update(job_id, condition=row)

    def _enqueue(self, row: dict[str, Any], now: float) -> None:
        try:
            job = Job(**row["spec"])
            self.config.policy.tier_of(job)
            self.state.quota.quota(job.team)
        except (InvalidInput, TypeError) as exc:  # written by a CLI that cannot see our config
            self.store.update(row["id"], state="failed", finished=now, message=f"refused: {exc}")
            return
        self.queue.add(job)
        self._queued.add(row["id"])

    def _launch_ready(self, now: float) -> None:
        for job_id, pending in list(self._pending.items()):
            if any(self.backend.running(v) for v in pending.victims):
                continue
            del self._pending[job_id]
            row = self.store.get(job_id)
            try:
                gpus = self.backend.launch(pending.run, row["command"])
            except (ShipyardError, OSError) as exc:  # e.g. a missing program, sbatch refusing
                self._charge(self.state.release(job_id), now)
                self.store.update(job_id, state="failed", finished=now, message=f"launch: {exc}")
                self._event("failed", job_id, reason=str(exc))
                continue
            pending.run.start = now
            self._reports[job_id] = now
            self.store.update(job_id, state="running", started=now, gpus=gpus, message="")
            self._condition(job_id, Condition(ADMITTED, f"as {pending.run.tier.name.lower()}"), now)

    def _stop_requested(self, now: float) -> None:
        for row in self.store.list("cancelling"):
            if row["id"] in self.state.running:
                self._stop(row["id"], row["spec"]["grace"], now, "cancelled", "cancelled")
        idle = self.config.idle_minutes * 60
        for job_id, run in list(self.state.running.items()):
            if job_id in self._pending or job_id in self._stopping:
                continue
            if now > run.start + run.job.time_limit:
                self._stop(job_id, run.job.grace, now, "failed", "time limit reached")
            elif run.tier == Tier.INTERACTIVE and now - self._reports.get(job_id, now) > idle:
                if job_id not in self._warned:
                    self._warned.add(job_id)
                    self._reports[job_id] = now  # one more idle period before reclaiming
                    self.store.update(job_id, message="idle: reclaimed if still idle")
                else:
                    self._stop(job_id, run.job.grace, now, "failed", "reclaimed: idle")

    def _stop(self, job_id: str, grace: float, now: float, then: str, why: str) -> None:
        self._stopping[job_id] = then
        self.store.update(job_id, message=why)
        if self.backend.running(job_id):
            self.backend.stop(job_id, grace, now)
        else:
            self._ended(job_id, None, now)

    def _ended(self, job_id: str, code: int | None, now: float) -> None:
        then = self._stopping.pop(job_id, None)
        # A preempted job's GPUs already belong to its preemptor (the policy released them).
        if then != "queued" and job_id in self.state.running:
            self._charge(self.state.release(job_id), now)
        self._pending.pop(job_id, None)
        if then == "queued":
            self.store.update(job_id, state="queued", gpus=None)
            return
        state = then or ("done" if code == 0 else "failed")
        self.store.update(job_id, state=state, finished=now, exit_code=code)
        self._event(state, job_id, exit_code=code)

    def _event(self, kind: str, job_id: str, **fields: Any) -> None:
        self.counts[kind] += 1
        record = {"at": round(self.clock(), 3), "event": kind, "job": job_id, **fields}
        print(json.dumps(record), file=self.log, flush=True)

    def metrics(self) -> bytes:
        """Prometheus text exposition of the service's gauges and counters."""
        return generate_latest(self.registry)

    def _charge(self, run: Running, now: float) -> None:
        # Chargeback: GPU-seconds held from launch to exit, per team and tier.
        key = (run.job.team, run.tier.name.lower())
        held = run.job.gpus * max(0.0, now - run.start)
        self.charged[key] = self.charged.get(key, 0.0) + held

    def status(self) -> dict[str, Any]:
        """Free GPUs, the largest gang per shape that could be placed now, and usage per team."""
        by_type = {
            gpu_type: {
                f"{per_node}_per_node": self.state.largest_gang(per_node, gpu_type)
                for per_node in GANG_SHAPES
            }
            for gpu_type in self.state.gpu_types
        }
        return {
            "free_gpus": sum(self.state.free),
            "nodes": {
                n.name: s for n, s in zip(self.state.nodes, self.state.node_state, strict=True)
            },
            "largest_gang": {
                f"{k}_per_node": max(shapes[f"{k}_per_node"] for shapes in by_type.values())
                for k in GANG_SHAPES
            },
            "largest_gang_by_type": by_type,
            "running": sorted(self.state.running),
            "queued": len(self.queue),
            "usage": {f"{t}/{g}": u for (t, g), u in self.state.quota.usage.items()},
            "allocated_gpu_hours": {
                f"{team}/{tier}": v / 3600 for (team, tier), v in sorted(self.charged.items())
            },
        }


_FAMILIES: Families = {
    "shipyard_scheduler_free_gpus": ("gauge", "GPUs free on every node"),
    "shipyard_scheduler_queued_jobs": ("gauge", "jobs waiting in the scheduler's queue"),
    "shipyard_scheduler_running_jobs": ("gauge", "jobs holding GPUs"),
    "shipyard_scheduler_passes_total": ("counter", "policy passes run"),
    "shipyard_scheduler_events_total": ("counter", "scheduling decisions by kind"),
    "shipyard_scheduler_allocated_gpu_seconds_total": (
        "counter",
        "GPU-seconds held from launch to exit, by team and tier",
    ),
}


def _samples(svc: Service) -> Iterator[Sample]:
    """Read from the live service at scrape time, so no figure is kept twice."""
    yield "shipyard_scheduler_free_gpus", {}, sum(svc.state.free)
    yield "shipyard_scheduler_queued_jobs", {}, len(svc.queue)
    yield "shipyard_scheduler_running_jobs", {}, len(svc.state.running)
    yield "shipyard_scheduler_passes_total", {}, svc.passes
    for kind, count in sorted(svc.counts.items()):
        yield "shipyard_scheduler_events_total", {"event": kind}, count
    for (team, tier), seconds in sorted(svc.charged.items()):
        yield (
            "shipyard_scheduler_allocated_gpu_seconds_total",
            {"team": team, "tier": tier},
            seconds,
        )
