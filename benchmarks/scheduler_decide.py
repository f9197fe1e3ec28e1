"""Time one scheduling pass: 10,000 queued jobs on a 4,096-GPU cluster (512 nodes of 8).

    .venv/bin/python benchmarks/scheduler_decide.py [--repeats 9]

The cluster starts about 90% busy with running jobs of 12 teams (some borrowing); the queue
holds a mix of 1–8 GPU jobs and 16–256 GPU gangs with topology wishes. Each repeat rebuilds the
same state (fixed seed) and times only `Policy.schedule`. The goal is a median of ≤ 100 ms.
"""

import argparse
import json
import random
import statistics
import sys
import time

from shipyard.scheduler import ClusterState, Job, JobQueue, Node, Policy, PolicyConfig, Running
from shipyard.scheduler.model import Tier
from shipyard.scheduler.quota import TeamQuota

TEAMS = [f"team{i:02d}" for i in range(12)]
GOAL_MS = 100.0


def build(seed: int) -> tuple[ClusterState, JobQueue, Policy]:
    rng = random.Random(seed)
    nodes = [
        Node(f"n{i:03d}", 8, leaf=f"leaf{i // 32}", block=f"block{i // 128}") for i in range(512)
    ]
    share = 4096 // len(TEAMS)
    teams = [TeamQuota(t, {"gpu": share}, cohort="org") for t in TEAMS]
    state = ClusterState(nodes, teams)
    config = PolicyConfig()
    for i in range(512):
        for g in (4, 2, 1) if i % 10 else ():
            team = rng.choice(TEAMS)
            job = Job(f"r{i}-{g}", team, g, 3600.0 * rng.choice((1, 2, 4)), preemptible=True)
            state.admit(Running(job, {i: g}, Tier.GUARANTEED, start=-rng.random() * 3600))
    queue = JobQueue(config)
    shapes = [(1, None), (2, None), (4, None), (8, 8), (16, 8), (64, 8), (256, 8)]
    for n in range(10_000):
        gpus, per_node = rng.choice(shapes)
        topology = rng.choice(("any", "any", "prefer-leaf", "require-block"))
        job = Job(
            f"q{n}",
            rng.choice(TEAMS),
            gpus,
            3600.0 * rng.choice((1, 2, 4, 8)),
            submit_time=float(n),
            gpus_per_node=per_node,
            topology=topology,
            preemptible=rng.random() < 0.7,
        )
        queue.add(job)
    return state, queue, Policy(config)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    times, cpu = [], []
    admitted = 0
    for _ in range(args.repeats):
        state, queue, policy = build(seed=7)
        started, cpu_started = time.perf_counter(), time.process_time()
        decision = policy.schedule(state, queue, now=0.0)
        times.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - cpu_started) * 1000)
        admitted = len(decision.admitted)
    median = statistics.median(times)
    print(f"one pass: median {median:.1f} ms over {args.repeats}, {admitted} admitted")
    result = {
        "name": "scheduler_decide",
        "value": round(median, 2),
        "unit": "ms per pass (10k queued, 4096 GPUs)",
        "baseline": GOAL_MS,
        "ratio": round(GOAL_MS / median, 2),
        "admitted": admitted,
        "min_ms": round(min(times), 2),
        # CPU time of the pass: what the wall time would be on an unshared core
        "cpu_median_ms": round(statistics.median(cpu), 2),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
