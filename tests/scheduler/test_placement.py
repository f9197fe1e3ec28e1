"""Gangs are placed whole and physically; topology, pools and node health are honoured."""

import random

import pytest

from shipyard.errors import InvalidInput
from shipyard.scheduler import (
    ClusterState,
    Job,
    JobQueue,
    Node,
    Policy,
    PolicyConfig,
    Running,
    TeamQuota,
)
from shipyard.scheduler.model import Tier

from .helpers import job, nodes, single_team


def occupy(state: ClusterState, node: int, gpus: int, name: str) -> None:
    state.admit(Running(job(name, gpus=gpus), {node: gpus}, Tier.GUARANTEED, start=0.0))


def test_eight_per_node_never_lands_on_four_plus_four() -> None:
    state = single_team(2)
    occupy(state, 0, 4, "x")
    occupy(state, 1, 4, "y")
    queue = JobQueue(PolicyConfig())
    queue.add(job("gang", gpus=8, gpus_per_node=8))
    queue.add(job("auto", gpus=8))
    decision = Policy().schedule(state, queue, now=0.0)
    assert decision.admitted == []
    assert state.free == [4, 4]


def test_per_node_shape_and_best_fit() -> None:
    state = single_team(4)
    occupy(state, 0, 6, "x")  # node 0 has 2 free: the tightest fit for a 2-GPU job
    occupy(state, 1, 1, "y")
    assert state.place(job("small", gpus=2)) == {0: 2}
    alloc = state.place(job("gang", gpus=16, gpus_per_node=8))
    assert alloc == {2: 8, 3: 8}
    big = state.place(job("big", gpus=12))  # one wholly free node plus the freest other
    assert big is not None and sorted(big.values()) == [4, 8] and set(big) <= {1, 2, 3}


def test_random_admissions_are_whole_gangs() -> None:
    rng = random.Random(3)
    for trial in range(30):
        state = single_team(6)
        for n in range(6):
            used = rng.randint(0, 8)
            if used:
                occupy(state, n, used, f"pre{trial}-{n}")
        before = list(state.free)
        queue = JobQueue(PolicyConfig())
        for k in range(12):
            gpn = rng.choice((None, 1, 2, 4, 8))
            gpus = (gpn or 1) * rng.randint(1, 4) if gpn else rng.randint(1, 20)
            queue.add(job(f"j{trial}-{k}", gpus=gpus, gpus_per_node=gpn))
        decision = Policy().schedule(state, queue, now=0.0)
        taken = [0] * 6
        for run in decision.admitted:
            assert sum(run.alloc.values()) == run.job.gpus
            if run.job.gpus_per_node:
                assert set(run.alloc.values()) == {run.job.gpus_per_node}
            for i, g in run.alloc.items():
                taken[i] += g
        assert all(f >= 0 for f in state.free)
        assert [b - t for b, t in zip(before, taken, strict=True)] == state.free


def test_topology_require_and_prefer() -> None:
    state = single_team(4)  # leaf0 = n0, n1; leaf1 = n2, n3
    occupy(state, 0, 4, "x")
    occupy(state, 2, 4, "y")  # each leaf has 12 free: 4 + 8
    assert state.place(job("leafy", gpus=14, topology="require-leaf")) is None
    spread = state.place(job("spread", gpus=14, topology="prefer-leaf"))
    assert spread is not None and sum(spread.values()) == 14
    inside = state.place(job("inside", gpus=12, topology="require-leaf"))
    assert inside is not None and len({state.nodes[i].leaf for i in inside}) == 1
    block = state.place(job("block", gpus=16, topology="require-block"))
    assert block is not None and len({state.nodes[i].block for i in block}) == 1


def test_small_jobs_stay_out_of_large_pool_and_drained_nodes() -> None:
    cluster = nodes(2) + [Node(f"L{i}", 8, pool="large") for i in (2, 3)]
    state = ClusterState(cluster, [TeamQuota("a", {"gpu": 32})])
    occupy(state, 0, 8, "x")
    occupy(state, 1, 8, "y")
    assert state.place(job("small", gpus=2)) is None  # only large-pool nodes have room
    assert state.place(job("big", gpus=16, gpus_per_node=8)) == {2: 8, 3: 8}
    state.set_node_state("L2", "drained")
    assert state.place(job("big2", gpus=16, gpus_per_node=8)) is None
    with pytest.raises(InvalidInput, match="node state 'broken'"):
        state.set_node_state("L3", "broken")


def test_bad_jobs_are_rejected() -> None:
    with pytest.raises(InvalidInput, match="gpus_per_node 3 must"):
        Job("j", "a", 8, 10.0, gpus_per_node=3)
    with pytest.raises(InvalidInput, match="priority 'urgent' unknown"):
        PolicyConfig().tier_of(Job("j", "a", 1, 10.0, priority="urgent"))
    with pytest.raises(InvalidInput, match="class 'vip' maps to 'boss'"):
        PolicyConfig(priority_classes={"vip": "boss"})


def test_bad_nodes_and_quotas_are_rejected() -> None:
    with pytest.raises(InvalidInput, match="node 'n9': needs a name and gpus ≥ 1"):
        Node("n9", 0)
    with pytest.raises(InvalidInput, match=r"nominal\[gpu\] must be an int"):
        TeamQuota("a", {"gpu": "lots"})  # type: ignore[dict-item]
