"""What a simulation reports: JCT, queueing delay, utilization, preemptions, fairness."""

import hashlib
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class JobRecord:
    id: str
    team: str
    gpus: int
    submit: float
    duration: float
    first_start: float | None = None
    admitted_at: float = 0.0
    finish: float | None = None
    allocated: float = 0.0  # GPU-seconds held (including grace waits and lost work)
    lost: float = 0.0  # GPU-seconds of work thrown away by preemption
    preemptions: int = 0
    by_tier: dict[str, float] = field(default_factory=dict)  # allocated GPU-seconds per tier
    spans: list[tuple[float, float]] = field(default_factory=list)  # (from, to) GPUs were held

    def hold(self, tier: str, start: float, end: float) -> None:
        gpu_seconds = self.gpus * (end - start)
        self.allocated += gpu_seconds
        self.by_tier[tier] = self.by_tier.get(tier, 0.0) + gpu_seconds
        self.spans.append((start, end))


@dataclass
class Report:
    jobs: int
    unfinished: int
    avg_jct: float
    p99_jct: float
    avg_queue_delay: float
    utilization: float  # useful GPU-time / (capacity × makespan)
    allocated_utilization: float
    preemptions: int
    lost_gpu_hours: float
    jain_fairness: float  # over per-team average slowdown (1 = perfectly even)
    # GPUs held / capacity over a fixed window (default: first to last submission).
    busy_fraction: float = 0.0
    busy_window: tuple[float, float] = (0.0, 0.0)
    per_team: dict[str, dict[str, float]] = field(default_factory=dict)
    # Per job size (GPUs): jobs, average JCT, average wait before the first start, preemptions.
    per_size: dict[int, dict[str, float]] = field(default_factory=dict)
    jobs_digest: str = ""  # SHA-256 of the sorted job ids: equal digests, the same jobs
    chargeback: dict[str, dict[str, float]] = field(default_factory=dict)
    fragmentation: dict[str, float] = field(default_factory=dict)
    # Hourly (hour since the first sample, free GPUs, fraction of them outside wholly free nodes).
    fragmentation_series: list[tuple[int, int, float]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(
    records: Sequence[JobRecord],
    capacity: int,
    samples: Sequence[tuple[float, int, int]],
    window: tuple[float, float] | None = None,
) -> Report:
    done = [r for r in records if r.finish is not None]
    jcts = sorted(_jct(r) for r in done)
    first = min((r.submit for r in records), default=0.0)
    last = max((r.finish or 0.0 for r in done), default=first)
    span = max(1.0, last - first) * max(1, capacity)
    teams: dict[str, list[JobRecord]] = {}
    for r in done:
        teams.setdefault(r.team, []).append(r)
    per_team = {
        team: {
            "jobs": float(len(rs)),
            "avg_jct": statistics.fmean(_jct(r) for r in rs),
            "avg_slowdown": statistics.fmean(_jct(r) / max(r.duration, 1.0) for r in rs),
            "gpu_hours": sum(r.gpus * r.duration for r in rs) / 3600,
        }
        for team, rs in sorted(teams.items())
    }
    sizes: dict[int, list[JobRecord]] = {}
    for r in done:
        sizes.setdefault(r.gpus, []).append(r)
    per_size = {
        gpus: {
            "jobs": float(len(rs)),
            "avg_jct": statistics.fmean(_jct(r) for r in rs),
            "avg_queue_delay": statistics.fmean(_wait(r) for r in rs),
            "preemptions": float(sum(r.preemptions for r in rs)),
        }
        for gpus, rs in sorted(sizes.items())
    }
    slowdowns = [t["avg_slowdown"] for t in per_team.values()]
    squares = sum(s * s for s in slowdowns)
    jain = sum(slowdowns) ** 2 / (len(slowdowns) * squares) if slowdowns else 1.0
    if window is None:
        submits = [r.submit for r in records] or [0.0]
        window = (min(submits), max(submits))
    frees = [s[1] for s in samples]
    scattered = [1 - s[2] / s[1] for s in samples if s[1] > 0]
    return Report(
        jobs=len(records),
        unfinished=len(records) - len(done),
        avg_jct=statistics.fmean(jcts) if jcts else 0.0,
        p99_jct=jcts[min(len(jcts) - 1, int(0.99 * len(jcts)))] if jcts else 0.0,
        avg_queue_delay=statistics.fmean(_wait(r) for r in done) if done else 0.0,
        utilization=sum(r.gpus * r.duration for r in done) / span,
        allocated_utilization=sum(r.allocated for r in done) / span,
        preemptions=sum(r.preemptions for r in records),
        lost_gpu_hours=sum(r.lost for r in records) / 3600,
        jain_fairness=jain,
        busy_fraction=busy_fraction(records, capacity, window),
        busy_window=window,
        per_team=per_team,
        per_size=per_size,
        jobs_digest=hashlib.sha256("\n".join(sorted(r.id for r in records)).encode()).hexdigest(),
        chargeback=_chargeback(records),
        fragmentation={
            "avg_free_gpus": statistics.fmean(frees) if frees else 0.0,
            "avg_scattered_fraction": statistics.fmean(scattered) if scattered else 0.0,
        },
        fragmentation_series=_hourly(samples),
    )


def busy_fraction(
    records: Sequence[JobRecord], capacity: int, window: tuple[float, float]
) -> float:
    """GPU-seconds held inside `window` over the capacity for that long (grace waits count)."""
    start, end = window
    if end <= start or capacity <= 0:
        return 0.0
    held = sum(r.gpus * max(0.0, min(end, b) - max(start, a)) for r in records for a, b in r.spans)
    return held / (capacity * (end - start))


def _hourly(samples: Sequence[tuple[float, int, int]]) -> list[tuple[int, int, float]]:
    """Samples summed per hour: separate per-VC replays each contribute one sample an hour."""
    if not samples:
        return []
    start = min(s[0] for s in samples)
    free: dict[int, int] = {}
    whole: dict[int, int] = {}
    for at, free_gpus, whole_node_gpus in samples:
        hour = int((at - start) // 3600)
        free[hour] = free.get(hour, 0) + free_gpus
        whole[hour] = whole.get(hour, 0) + whole_node_gpus
    return [
        (hour, free[hour], 1 - whole[hour] / free[hour] if free[hour] else 0.0)
        for hour in sorted(free)
    ]


def _chargeback(records: Sequence[JobRecord]) -> dict[str, dict[str, float]]:
    """Per team: allocated GPU-hours per tier, and active (useful) GPU-hours."""
    out: dict[str, dict[str, float]] = {}
    for r in records:
        team = out.setdefault(r.team, {"active_gpu_hours": 0.0})
        if r.finish is not None:
            team["active_gpu_hours"] += r.gpus * r.duration / 3600
        for tier, seconds in r.by_tier.items():
            key = f"allocated_gpu_hours_{tier}"
            team[key] = team.get(key, 0.0) + seconds / 3600
    return dict(sorted(out.items()))


def _wait(record: JobRecord) -> float:
    return (record.first_start or record.submit) - record.submit


def _jct(record: JobRecord) -> float:
    assert record.finish is not None
    return record.finish - record.submit
