"""Every queued job carries a reason: Inadmissible (never, as asked) or Pending (not yet)."""

from pathlib import Path

from shipyard.db import Database
from shipyard.scheduler import (
    ClusterState,
    Job,
    JobQueue,
    Policy,
    PolicyConfig,
    Running,
    TeamQuota,
    Tier,
)
from shipyard.scheduler.conditions import Condition, Explainer, inadmissible
from shipyard.scheduler.config import parse_config
from shipyard.scheduler.local import LocalBackend
from shipyard.scheduler.service import Service
from shipyard.scheduler.store import JobStore

from .helpers import job, nodes


def two_teams(count: int = 2, gpus: int = 8, cohort: str | None = "org") -> ClusterState:
    teams = [TeamQuota("a", {"gpu": 8}, cohort=cohort), TeamQuota("b", {"gpu": 8}, cohort=cohort)]
    return ClusterState(nodes(count, gpus), teams)


def explain(state: ClusterState, j: Job, config: PolicyConfig | None = None) -> str:
    """Run one pass with `j` queued (it must stay queued) and return its condition."""
    cfg = config or PolicyConfig()
    queue = JobQueue(cfg)
    queue.add(j)
    decision = Policy(cfg).schedule(state, queue, now=0.0)
    assert [r.job.id for r in decision.admitted] == []
    return str(Explainer(state, cfg, decision.reservation, 0.0)(j))


def hold(
    state: ClusterState, name: str, alloc: dict[int, int], team: str = "a", **kw: object
) -> None:
    gang = job(name, team=team, gpus=sum(alloc.values()), **kw)
    state.admit(Running(gang, alloc, Tier.GUARANTEED, start=0.0))


def test_non_preemptible_above_quota() -> None:
    state = two_teams()
    said = explain(state, job("big", gpus=16))
    assert said == "Inadmissible: exceeds team quota (asks 16, quota 8, non-preemptible)"


def test_above_quota_for_other_reasons() -> None:
    assert explain(two_teams(cohort=None), job("big", gpus=16, preemptible=True)) == (
        "Inadmissible: exceeds team quota (asks 16, quota 8, no cohort to borrow from)"
    )
    off = PolicyConfig(borrowing=False)
    assert explain(two_teams(), job("big", gpus=16, preemptible=True), off) == (
        "Inadmissible: exceeds team quota (asks 16, quota 8, borrowing is off)"
    )
    twice = job("big", gpus=16, preemptible=True, preemptions=2)
    assert explain(two_teams(), twice) == (
        "Inadmissible: exceeds team quota"
        " (asks 16, quota 8, preempted 2 times, so it borrows no more)"
    )
    capped = ClusterState(
        nodes(4),
        [TeamQuota("a", {"gpu": 8}, cohort="org", borrowing_limit={"gpu": 4}),
         TeamQuota("b", {"gpu": 24}, cohort="org")],
    )  # fmt: skip
    assert explain(capped, job("big", gpus=16, preemptible=True)) == (
        "Inadmissible: exceeds team quota (asks 16, quota 8, at most 12 with borrowing)"
    )


def test_no_node_shape_fits() -> None:
    state = two_teams(count=4, gpus=4)
    assert explain(state, job("wide", gpus=8, gpus_per_node=8)) == (
        "Inadmissible: no node shape fits (8 GPUs as 1 node × 8)"
    )
    leafy = job("leafy", gpus=12, topology="require-leaf", preemptible=True)
    assert explain(state, leafy) == "Inadmissible: no node shape fits (12 GPUs, require-leaf)"


def test_more_gpus_than_the_cluster_or_type() -> None:
    state = ClusterState(nodes(2, 4), [TeamQuota("a", {"gpu": 64, "h100": 8})])
    assert explain(state, job("huge", gpus=16)) == (
        "Inadmissible: asks 16 GPUs, the cluster has 8 healthy 'gpu' GPUs"
    )
    assert explain(state, job("typed", gpus=1, gpu_type="h100")) == (
        "Inadmissible: no node has GPU type 'h100'"
    )
    state.set_node_state("n1", "drained")
    assert explain(state, job("half", gpus=8)) == (
        "Inadmissible: asks 8 GPUs, the cluster has 4 healthy 'gpu' GPUs"
    )
    state.set_node_state("n1", "up")  # back up: the same shape is admissible again
    assert inadmissible(state, job("half", gpus=8), PolicyConfig()) is None


def test_pending_for_gpus_and_quota() -> None:
    state = ClusterState(nodes(2), [TeamQuota("a", {"gpu": 32})])
    hold(state, "x", {0: 8})
    hold(state, "y", {1: 4})
    assert explain(state, job("eight", gpus=8)) == (
        "Pending: waiting for 4 GPUs (asks 8, 4 free); next in line, nodes are reserved for it"
    )
    state = two_teams()
    hold(state, "mine", {0: 6})
    assert explain(state, job("more", gpus=4)) == (
        "Pending: waiting for quota (team a uses 6 of its 8, asks 4)"
    )
    hold(state, "theirs", {1: 8}, team="b")
    assert explain(state, job("borrow", gpus=4, preemptible=True)) == (
        "Pending: waiting for quota to borrow: the cohort has none free (team a uses 6 of its 8,"
        " asks 4)"
    )


def test_pending_reclaim_when_no_preemption_is_left() -> None:
    state = two_teams()
    hold(state, "lent", {0: 8, 1: 8}, team="b", preemptible=True)  # b borrows all of a's 8
    no_budget = PolicyConfig(preemption_budget=0)
    assert explain(state, job("mine", gpus=4), no_budget) == (
        "Pending: waiting to reclaim quota lent to other teams (team a uses 0 of its 8, asks 4)"
    )


def test_pending_on_fragmentation_and_the_reservation() -> None:
    state = ClusterState(nodes(2), [TeamQuota("a", {"gpu": 32})])
    hold(state, "x", {0: 4, 1: 4}, limit=100.0)
    assert explain(state, job("gang", gpus=8, gpus_per_node=8)) == (
        "Pending: waiting for a placement: 8 GPUs free, not as 8 GPUs as 1 node × 8; "
        "next in line, nodes are reserved for it"
    )
    # Node 0 is reserved for the gang at t=100; a 4-GPU job fits only there and would run on.
    state = ClusterState(nodes(2), [TeamQuota("a", {"gpu": 32})])
    hold(state, "x", {0: 4}, limit=100.0)
    hold(state, "y", {1: 8}, limit=1000.0)
    cfg = PolicyConfig(order="fifo")
    queue = JobQueue(cfg)
    queue.add(job("gang", gpus=8, gpus_per_node=8, submit_time=1.0))
    queue.add(job("long", gpus=4, limit=500.0, submit_time=2.0))
    decision = Policy(cfg).schedule(state, queue, now=0.0)
    assert decision.admitted == [] and decision.reservation is not None
    said = Explainer(state, cfg, decision.reservation, 0.0)(list(queue)[1])
    assert said == Condition("Pending", "would delay job gang, which holds the reservation")


def test_an_inadmissible_job_never_holds_the_reservation() -> None:
    state = ClusterState(nodes(2, 4), [TeamQuota("a", {"gpu": 8})])
    hold(state, "x", {0: 2}, limit=100.0)
    cfg = PolicyConfig(order="fifo")
    queue = JobQueue(cfg)
    queue.add(job("never", gpus=8, gpus_per_node=8, submit_time=1.0))
    queue.add(job("whole", gpus=8, submit_time=2.0))
    queue.add(job("small", gpus=1, limit=100.0, submit_time=3.0))
    decision = Policy(cfg).schedule(state, queue, now=0.0)
    assert decision.reservation is not None and decision.reservation.job_id == "whole"
    assert [r.job.id for r in decision.admitted] == ["small"]  # it ends by the shadow time
    # Strict order stops at the first job that cannot start, but not at one that never can.
    strict = PolicyConfig(order="fifo", strict=True, backfill=False)
    queue = JobQueue(strict)
    queue.add(job("never", gpus=8, gpus_per_node=8, submit_time=1.0))
    queue.add(job("next", gpus=1, submit_time=2.0))
    decision = Policy(strict).schedule(state, queue, now=0.0)
    assert [r.job.id for r in decision.admitted] == ["next"]


def test_service_stores_conditions(tmp_path: Path, db_url: str) -> None:
    config = parse_config(
        {"nodes": [{"name": "n0", "gpus": 4}],
         "teams": [{"team": "a", "nominal": {"gpu": 2}, "cohort": "ab"},
                   {"team": "b", "nominal": {"gpu": 2}, "cohort": "ab"}]}
    )  # fmt: skip
    store = JobStore(Database(db_url))
    svc = Service(config, store, LocalBackend(config.nodes, tmp_path / "logs"), lambda: 50.0)
    try:
        never = store.submit(Job("", "a", 4, 60.0), ["true"])
        svc.tick()
        row = store.get(never)
        assert row["state"] == "queued"
        assert row["condition"] == {
            "reason": "Inadmissible",
            "message": "exceeds team quota (asks 4, quota 2, non-preemptible)",
            "since": 50.0,
        }
        svc.clock = lambda: 60.0
        svc.tick()  # unchanged: the time it first held is kept
        assert store.get(never)["condition"]["since"] == 50.0
        sleeper = store.submit(Job("", "b", 2, 60.0), ["sleep", "30"])
        svc.tick()
        assert store.get(sleeper)["condition"] == {
            "reason": "Admitted", "message": "as guaranteed", "since": 60.0
        }  # fmt: skip
    finally:
        svc.backend.shutdown()
