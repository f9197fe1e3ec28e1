"""Event-driven trace replay through the unchanged policy.

Events are arrivals and completions; after all events of one instant, one scheduling pass runs.
A job runs for its remaining true duration (never shown to the policy). A preempted job loses
the work since its last checkpoint, keeps the rest, and is requeued with its original submit time.
"""

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

from shipyard.scheduler.cluster import ClusterState
from shipyard.scheduler.metrics import JobRecord, Report, summarize
from shipyard.scheduler.model import Job, Node, Running
from shipyard.scheduler.policy import JobQueue, Policy, PolicyConfig
from shipyard.scheduler.quota import TeamQuota

SAMPLE_EVERY = 3600.0  # seconds of simulated time between fragmentation samples


@dataclass
class _Live:
    record: JobRecord
    attempt: int = 0


@dataclass
class Simulation:
    nodes: Sequence[Node]
    teams: Sequence[TeamQuota]
    config: PolicyConfig = field(default_factory=PolicyConfig)

    def run(self, jobs: Sequence[Job]) -> Report:
        records, samples = self.replay(jobs)
        return summarize(records, sum(n.gpus for n in self.nodes), samples)

    def replay(self, jobs: Sequence[Job]) -> tuple[list[JobRecord], list[tuple[float, int, int]]]:
        """Every job's record and the fragmentation samples (time, free GPUs, whole-node GPUs)."""
        state = ClusterState(self.nodes, self.teams)
        policy = Policy(self.config)
        queue = JobQueue(self.config)
        live: dict[str, _Live] = {}
        events: list[tuple[float, int, int, str]] = []  # time, kind (0 end, 1 arrival), attempt
        by_id = {}
        for job in jobs:
            by_id[job.id] = job
            record = JobRecord(job.id, job.team, job.gpus, job.submit_time, job.duration)
            live[job.id] = _Live(record)
            events.append((job.submit_time, 1, 0, job.id))
        heapq.heapify(events)
        samples: list[tuple[float, int, int]] = []
        next_sample = 0.0
        while events:
            now = events[0][0]
            # The state left by the last event held until now: sample it on each hour passed.
            while next_sample <= now:
                samples.append(_fragmentation(state, next_sample))
                next_sample += SAMPLE_EVERY
            while events and events[0][0] == now:
                _, kind, attempt, job_id = heapq.heappop(events)
                if kind == 1:
                    queue.add(by_id[job_id])
                elif attempt == live[job_id].attempt and job_id in state.running:
                    run = state.release(job_id)
                    record = live[job_id].record
                    record.finish = now
                    record.hold(run.tier.name.lower(), record.admitted_at, now)
            if not queue:
                continue
            decision = policy.schedule(state, queue, now)
            for victim, _ in decision.preempted:
                self._requeue(victim, now, live[victim.job.id], queue)
            for run in decision.admitted:
                entry = live[run.job.id]
                entry.attempt += 1
                run.last_checkpoint = run.start
                if entry.record.first_start is None:
                    entry.record.first_start = run.start
                entry.record.admitted_at = now
                end = run.start + max(0.0, run.job.duration - run.job.done)
                heapq.heappush(events, (end, 0, entry.attempt, run.job.id))
            queue.remove({run.job.id for run in decision.admitted})
        return [e.record for e in live.values()], samples

    @staticmethod
    def _requeue(victim: Running, now: float, entry: _Live, queue: JobQueue) -> None:
        job = victim.job
        kept = max(0.0, victim.checkpoint_at(now) - victim.start) if now > victim.start else 0.0
        entry.record.lost += victim.lost_work(now) if now > victim.start else 0.0
        entry.record.preemptions += 1
        entry.record.hold(victim.tier.name.lower(), entry.record.admitted_at, now)
        entry.attempt += 1  # its pending completion event is now stale
        job.done += kept
        job.preemptions += 1
        queue.add(job)


def _fragmentation(state: ClusterState, now: float) -> tuple[float, int, int]:
    free = sum(state.free)
    whole = sum((f // n.gpus) * n.gpus for f, n in zip(state.free, state.nodes, strict=True))
    return (now, free, whole)
