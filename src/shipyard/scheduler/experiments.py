"""The trace policies the simulator and benchmark compare, on Philly-style virtual clusters.

- `fifo` / `sjf`: the Helios simulator rules: each VC alone (8 GPUs a node), strict order, no
  backfill, oracle durations as limits. Only the simulator check uses them.
- `slurm`: each VC its own partition, FIFO priority plus EASY backfill on the time limits, no
  borrowing, no preemption.
- `slurm-pooled`: the same FIFO + EASY on one partition holding every VC's nodes, open to every
  team (borrowing without limit, never reclaimed).
- `shipyard`: the same pooled nodes under Shipyard's policy: each VC a team whose nominal quota
  is its VC's GPUs, all in one cohort (borrowing), shortest limit first, backfill and
  checkpoint-aware reclaim.

`slurm` → `slurm-pooled` is the pooling gain; `slurm-pooled` → `shipyard` is the policy gain.
Every policy but the Helios check sees the same user time limits (a `LimitModel`), never the
true durations.
"""

from collections.abc import Callable, Sequence

from shipyard.errors import InvalidInput
from shipyard.scheduler.metrics import JobRecord, Report, summarize
from shipyard.scheduler.model import Job, Node
from shipyard.scheduler.policy import PolicyConfig
from shipyard.scheduler.quota import TeamQuota
from shipyard.scheduler.simulator import Simulation
from shipyard.scheduler.trace import LimitModel, TraceJob, oracle_limit, to_jobs

POLICIES = ("fifo", "sjf", "slurm", "slurm-pooled", "shipyard")
GPUS_PER_NODE = 8
CHECKPOINT_INTERVAL = 1800.0  # simulated jobs checkpoint every 30 minutes
FIFO_EASY = PolicyConfig(order="fifo", borrowing=False, preemption=False)


def simulate_trace(
    trace: Sequence[TraceJob],
    vc_nodes: dict[str, int],
    policy: str,
    limits: Callable[[TraceJob], float] | None = None,
) -> Report:
    """Replay `trace` (jobs of VCs not in `vc_nodes` are dropped) under one named policy.

    `limits` gives each job its declared time limit (default: `LimitModel()`); the Helios
    checks `fifo` and `sjf` always use the true durations, as their rules say.
    """
    if policy not in POLICIES:
        raise InvalidInput(f"policy {policy!r} unknown (allowed: {', '.join(POLICIES)})")
    kept = [t for t in trace if t.vc in vc_nodes]
    limit = limits or LimitModel()
    window = _arrivals(kept)
    if policy in ("fifo", "sjf"):
        config = PolicyConfig(
            order=policy, strict=True, backfill=False, borrowing=False, preemption=False
        )
        return _per_vc(kept, vc_nodes, config, oracle_limit, window)
    if policy == "slurm":
        return _per_vc(kept, vc_nodes, FIFO_EASY, limit, window)
    nodes = [_node(vc, i) for vc, count in vc_nodes.items() for i in range(count)]
    total = len(nodes) * GPUS_PER_NODE
    if policy == "slurm-pooled":
        # One partition: every team may use every GPU, so quota never binds.
        teams = [TeamQuota(vc, {"gpu": total}) for vc in vc_nodes]
        jobs = to_jobs(kept, limit, preemptible=False)
        return _run(Simulation(nodes, teams, FIFO_EASY), jobs, total, window)
    teams = [TeamQuota(vc, {"gpu": n * GPUS_PER_NODE}, cohort="org") for vc, n in vc_nodes.items()]
    jobs = to_jobs(kept, limit, checkpoint_interval=CHECKPOINT_INTERVAL)
    return _run(Simulation(nodes, teams, PolicyConfig()), jobs, total, window)


def _run(sim: Simulation, jobs: list[Job], capacity: int, window: tuple[float, float]) -> Report:
    records, samples = sim.replay(jobs)
    return summarize(records, capacity, samples, window)


def _per_vc(
    trace: Sequence[TraceJob],
    vc_nodes: dict[str, int],
    config: PolicyConfig,
    limit: Callable[[TraceJob], float],
    window: tuple[float, float],
) -> Report:
    records: list[JobRecord] = []
    samples: list[tuple[float, int, int]] = []
    for vc, count in vc_nodes.items():
        nodes = [_node(vc, i) for i in range(count)]
        team = TeamQuota(vc, {"gpu": count * GPUS_PER_NODE})
        jobs = to_jobs([t for t in trace if t.vc == vc], limit, preemptible=False)
        got, sampled = Simulation(nodes, [team], config).replay(jobs)
        records += got
        samples += sampled
    return summarize(records, sum(vc_nodes.values()) * GPUS_PER_NODE, samples, window)


def _arrivals(trace: Sequence[TraceJob]) -> tuple[float, float]:
    """The fixed window every arm is measured busy over: first to last submission."""
    submits = [t.submit for t in trace] or [0.0]
    return (min(submits), max(submits))


def _node(vc: str, i: int) -> Node:
    return Node(f"{vc}-{i:03d}", GPUS_PER_NODE, leaf=f"{vc}-leaf{i // 16}", block=vc)
