"""Multi-tenant GPU scheduler: one policy core for the trace simulator and the live backends."""

from shipyard.scheduler.cluster import ClusterState
from shipyard.scheduler.metrics import JobRecord, Report, summarize
from shipyard.scheduler.model import PRIORITY_CLASSES, Allocation, Job, Node, Running, Tier
from shipyard.scheduler.policy import Decision, JobQueue, Policy, PolicyConfig
from shipyard.scheduler.quota import Fit, QuotaBook, TeamQuota
from shipyard.scheduler.reservation import Reservation
from shipyard.scheduler.simulator import Simulation

__all__ = [
    "PRIORITY_CLASSES",
    "Allocation",
    "ClusterState",
    "Decision",
    "Fit",
    "Job",
    "JobQueue",
    "JobRecord",
    "Node",
    "Policy",
    "PolicyConfig",
    "QuotaBook",
    "Report",
    "Reservation",
    "Running",
    "Simulation",
    "TeamQuota",
    "Tier",
    "summarize",
]
