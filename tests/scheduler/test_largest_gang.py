"""`/status`'s largest gang per shape is what the placement code would actually place."""

import random
from pathlib import Path

from shipyard.db import Database
from shipyard.scheduler import ClusterState, Job, Node, Running, TeamQuota, Tier
from shipyard.scheduler.config import parse_config
from shipyard.scheduler.local import LocalBackend
from shipyard.scheduler.service import Service
from shipyard.scheduler.store import JobStore

from .helpers import job


def brute_force(state: ClusterState, per_node: int, gpu_type: str) -> int:
    """Try every gang size on the placement code; the largest that places."""
    best = 0
    for count in range(1, len(state.nodes) + 1):
        gang = Job("g", "a", count * per_node, 1.0, gpus_per_node=per_node, gpu_type=gpu_type)
        if state.place(gang) is not None:
            best = count * per_node
    return best


def test_idle_two_node_cluster(tmp_path: Path) -> None:
    config = parse_config(
        {"nodes": [{"name": "n0", "gpus": 4}, {"name": "n1", "gpus": 4}],
         "teams": [{"team": "a", "nominal": {"gpu": 8}}]}
    )  # fmt: skip
    store = JobStore(Database(f"sqlite://{tmp_path / 'c.db'}"))
    svc = Service(config, store, LocalBackend(config.nodes, tmp_path))
    status = svc.status()
    # One GPU on each of two nodes is the largest 1-per-node gang, not the 8 free GPUs.
    assert status["largest_gang"] == {"1_per_node": 2, "2_per_node": 4, "4_per_node": 8,
                                      "8_per_node": 0}  # fmt: skip
    assert status["largest_gang_by_type"] == {"gpu": status["largest_gang"]}
    svc.state.admit(Running(job("x", gpus=3), {0: 3}, Tier.GUARANTEED, start=0.0))
    svc.state.set_node_state("n1", "drained")
    assert svc.status()["largest_gang"] == {"1_per_node": 1, "2_per_node": 0, "4_per_node": 0,
                                            "8_per_node": 0}  # fmt: skip


def test_large_pool_makes_size_not_monotone() -> None:
    # Two default nodes and eight large-pool nodes: gangs under 8 GPUs stay off the large pool,
    # so a 1-per-node gang can be 2 or 8 GPUs, never 3 to 7 (and never 10).
    pool = [Node(f"d{i}", 8) for i in range(2)] + [Node(f"l{i}", 8, pool="large") for i in range(8)]
    state = ClusterState(pool, [TeamQuota("a", {"gpu": 80})])
    assert state.largest_gang(1, "gpu") == 10
    state.admit(Running(job("x", gpus=8), {2: 8}, Tier.GUARANTEED, start=0.0))
    state.admit(Running(job("y", gpus=8), {3: 8}, Tier.GUARANTEED, start=0.0))
    assert state.largest_gang(1, "gpu") == 8 == brute_force(state, 1, "gpu")
    # With 7 nodes left a 7-GPU gang is small, so only the 2 default nodes may take it.
    state.admit(Running(job("z", gpus=8), {4: 8}, Tier.GUARANTEED, start=0.0))
    assert state.largest_gang(1, "gpu") == 2 == brute_force(state, 1, "gpu")


def test_matches_placement_on_random_small_clusters() -> None:
    rng = random.Random(5)
    for trial in range(200):
        count = rng.randint(1, 6)
        pool = [
            Node(
                f"n{i}",
                rng.choice((1, 2, 4, 8)),
                gpu_type=rng.choice(("a100", "h100")),
                pool=rng.choice(("default", "default", "large")),
            )
            for i in range(count)
        ]
        state = ClusterState(pool, [TeamQuota("a", {"a100": 64, "h100": 64})])
        for i, node in enumerate(pool):
            used = rng.randint(0, node.gpus)
            if used:
                gang = Job(f"u{trial}-{i}", "a", used, 1.0, gpu_type=node.gpu_type)
                state.admit(Running(gang, {i: used}, Tier.GUARANTEED, start=0.0))
            if rng.random() < 0.2:
                state.set_node_state(node.name, "quarantined")
        for per_node in (1, 2, 4, 8):
            for gpu_type in ("a100", "h100"):
                expected = brute_force(state, per_node, gpu_type)
                assert state.largest_gang(per_node, gpu_type) == expected, (trial, per_node)
