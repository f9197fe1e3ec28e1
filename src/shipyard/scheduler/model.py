"""The scheduler's nouns: nodes, jobs, tiers, allocations and running jobs.

These are plain data shared by the policy, the simulator and the live backends; nothing here
knows about time sources, processes or databases.
"""

import enum
from dataclasses import dataclass, field

from shipyard.errors import InvalidInput


class Tier(enum.IntEnum):
    """Effective standing of a running job; a lower value is more important."""

    PRODUCTION = 0
    GUARANTEED = 1
    BORROWED = 2
    INTERACTIVE = 3
    SCAVENGER = 4


# The default priority classes a job may declare (the policy config may replace them), mapped to
# the tier a job gets when admitted within its team's nominal quota; beyond nominal a job runs as
# BORROWED (or lower) instead.
PRIORITY_CLASSES: dict[str, str] = {
    "production": "production",
    "normal": "guaranteed",
    "interactive": "interactive",
    "scavenger": "scavenger",
}

TOPOLOGY_MODES = ("any", "prefer-leaf", "require-leaf", "prefer-block", "require-block")
NODE_STATES = ("up", "drained", "quarantined")


@dataclass(frozen=True)
class Node:
    name: str
    gpus: int
    gpu_type: str = "gpu"
    nvlink: str = ""
    leaf: str = ""
    block: str = ""
    pool: str = "default"

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.gpus, int) or self.gpus < 1:
            raise InvalidInput(f"node {self.name!r}: needs a name and gpus ≥ 1, got {self.gpus!r}")


@dataclass
class Job:
    """A request for a gang of GPUs. `duration` is known only to the simulator (the truth)."""

    id: str
    team: str
    gpus: int
    time_limit: float
    submit_time: float = 0.0
    gpus_per_node: int | None = None
    gpu_type: str = "gpu"
    priority: str = "normal"
    preemptible: bool = False
    grace: float = 30.0
    checkpoint_interval: float = 0.0
    topology: str = "any"
    duration: float = 0.0
    # Work already checkpointed (seconds of progress) before this attempt started.
    done: float = 0.0
    preemptions: int = 0

    def __post_init__(self) -> None:
        validate_job(self)


def validate_job(job: Job) -> None:
    where = f"job {job.id!r}"
    if job.gpus < 1:
        raise InvalidInput(f"{where}: gpus must be ≥ 1, got {job.gpus}")
    if job.gpus_per_node is not None and (
        job.gpus_per_node < 1 or job.gpus % job.gpus_per_node != 0
    ):
        raise InvalidInput(
            f"{where}: gpus_per_node {job.gpus_per_node} must be ≥ 1 and divide gpus {job.gpus}"
        )
    if job.time_limit <= 0:
        raise InvalidInput(f"{where}: time_limit must be > 0 seconds, got {job.time_limit}")
    if job.topology not in TOPOLOGY_MODES:
        allowed = ", ".join(TOPOLOGY_MODES)
        raise InvalidInput(f"{where}: topology {job.topology!r} unknown (allowed: {allowed})")
    if job.grace < 0 or job.checkpoint_interval < 0:
        raise InvalidInput(f"{where}: grace and checkpoint_interval must be ≥ 0")


# node index → number of GPUs taken on that node
Allocation = dict[int, int]


@dataclass
class Running:
    """A job holding GPUs. `start` is when it may begin (after its victims' grace periods)."""

    job: Job
    alloc: Allocation
    tier: Tier
    start: float
    last_checkpoint: float = field(default=0.0)

    @property
    def expected_end(self) -> float:
        return self.start + self.job.time_limit

    def lost_work(self, now: float) -> float:
        """GPU-seconds lost if stopped now: time since the last checkpoint times its GPUs."""
        return max(0.0, now - self.checkpoint_at(now)) * self.job.gpus

    def checkpoint_at(self, now: float) -> float:
        """Time of the last checkpoint before `now` (periodic checkpoints from `start`)."""
        interval = self.job.checkpoint_interval
        if interval <= 0 or now <= self.start:
            return max(self.start, self.last_checkpoint)
        return max(self.last_checkpoint, self.start + ((now - self.start) // interval) * interval)
