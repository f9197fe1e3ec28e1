"""The trace policies the simulator and benchmark compare, on Philly-style virtual clusters.

- `fifo` / `sjf`: the Helios simulator rules: each VC alone (8 GPUs a node), strict order, no
  backfill, oracle durations as limits.
- `slurm`: a Slurm-like baseline: each VC its own partition, FIFO priority plus EASY backfill on
  declared limits, no borrowing, no preemption.
- `shipyard`: one shared cluster; each VC a team whose nominal quota is its VC's GPUs, all in
  one cohort (borrowing), backfill, checkpoint-aware reclaim; it sees declared limits only.
"""

from collections.abc import Callable, Sequence

from shipyard.errors import InvalidInput
from shipyard.scheduler.metrics import JobRecord, Report, summarize
from shipyard.scheduler.model import Node
from shipyard.scheduler.policy import PolicyConfig
from shipyard.scheduler.quota import TeamQuota
from shipyard.scheduler.simulator import Simulation
from shipyard.scheduler.trace import TraceJob, declared_limit, oracle_limit, to_jobs

POLICIES = ("fifo", "sjf", "slurm", "shipyard")
GPUS_PER_NODE = 8
CHECKPOINT_INTERVAL = 1800.0  # simulated jobs checkpoint every 30 minutes


def simulate_trace(trace: Sequence[TraceJob], vc_nodes: dict[str, int], policy: str) -> Report:
    """Replay `trace` (jobs of VCs not in `vc_nodes` are dropped) under one named policy."""
    if policy not in POLICIES:
        raise InvalidInput(f"policy {policy!r} unknown (allowed: {', '.join(POLICIES)})")
    kept = [t for t in trace if t.vc in vc_nodes]
    if policy == "shipyard":
        nodes = [_node(vc, i) for vc, count in vc_nodes.items() for i in range(count)]
        teams = [
            TeamQuota(vc, {"gpu": n * GPUS_PER_NODE}, cohort="org") for vc, n in vc_nodes.items()
        ]
        jobs = to_jobs(kept, declared_limit, checkpoint_interval=CHECKPOINT_INTERVAL)
        return Simulation(nodes, teams, PolicyConfig()).run(jobs)
    if policy == "slurm":
        config = PolicyConfig(order="fifo", borrowing=False, preemption=False)
        return _per_vc(kept, vc_nodes, config, declared_limit)
    config = PolicyConfig(
        order=policy, strict=True, backfill=False, borrowing=False, preemption=False
    )
    return _per_vc(kept, vc_nodes, config, oracle_limit)


def _per_vc(
    trace: Sequence[TraceJob],
    vc_nodes: dict[str, int],
    config: PolicyConfig,
    limit: Callable[[float], float],
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
    return summarize(records, sum(vc_nodes.values()) * GPUS_PER_NODE, samples)


def _node(vc: str, i: int) -> Node:
    return Node(f"{vc}-{i:03d}", GPUS_PER_NODE, leaf=f"{vc}-leaf{i // 16}", block=vc)
