"""Backfill never delays the reservation; preemption takes the least lost work and never loops."""

import random

from shipyard.scheduler import (
    ClusterState,
    Job,
    JobQueue,
    Policy,
    PolicyConfig,
    Running,
    Simulation,
    TeamQuota,
    Tier,
)

from .helpers import job, nodes, single_team


def drive(state: ClusterState, policy: Policy, jobs: list[Job]) -> tuple[dict, dict]:
    """Run jobs exactly to their time limits; return start times and each job's first shadow."""
    queue = JobQueue(policy.config)
    for j in jobs:
        queue.add(j)
    starts: dict[str, float] = {}
    shadows: dict[str, float] = {}
    now = 0.0
    while len(queue) or state.running:
        decision = policy.schedule(state, queue, now)
        if decision.reservation is not None:
            shadows.setdefault(decision.reservation.job_id, decision.reservation.start)
        for run in decision.admitted:
            starts[run.job.id] = run.start
        queue.remove({run.job.id for run in decision.admitted})
        now = min(run.expected_end for run in state.running.values())
        for run in [r for r in state.running.values() if r.expected_end == now]:
            state.release(run.job.id)
    return starts, shadows


def test_backfill_respects_shadow_time() -> None:
    state = single_team(2)
    state.admit(Running(job("a", gpus=8, limit=100), {0: 8}, Tier.GUARANTEED, start=0.0))
    state.admit(Running(job("b", gpus=4, limit=50), {1: 4}, Tier.GUARANTEED, start=0.0))
    policy = Policy(PolicyConfig(order="fifo"))
    queue = JobQueue(policy.config)
    for j in (
        job("big", gpus=16, limit=10, submit_time=1),
        job("long", gpus=4, limit=200, submit_time=2),
        job("short", gpus=4, limit=40, submit_time=3),
    ):
        queue.add(j)
    decision = policy.schedule(state, queue, now=0.0)
    assert decision.reservation is not None
    assert decision.reservation.job_id == "big" and decision.reservation.start == 100.0
    assert [r.job.id for r in decision.admitted] == ["short"]  # "long" would run past 100


def test_strict_order_stops_at_blocked_head() -> None:
    state = single_team(2)
    state.admit(Running(job("held", gpus=1), {0: 1}, Tier.GUARANTEED, start=0.0))
    policy = Policy(PolicyConfig(order="fifo", strict=True, backfill=False))
    queue = JobQueue(policy.config)
    queue.add(job("huge", gpus=16, submit_time=1))
    queue.add(job("tiny", gpus=1, submit_time=2))
    assert policy.schedule(state, queue, 0.0).admitted == []


def test_backfill_never_delays_reservation_random() -> None:
    rng = random.Random(11)
    for trial in range(25):
        state = single_team(4)
        jobs = [
            job(
                f"t{trial}-{k}",
                gpus=rng.choice((1, 2, 4, 8, 12, 16, 24, 32)),
                limit=float(rng.randint(1, 50)),
                submit_time=float(k),
            )
            for k in range(25)
        ]
        starts, shadows = drive(state, Policy(PolicyConfig(order="fifo")), jobs)
        assert len(starts) == len(jobs)
        assert shadows, "every trial should block at least one big job"
        for job_id, shadow in shadows.items():
            assert starts[job_id] <= shadow, (trial, job_id)


def two_teams(count: int = 2) -> ClusterState:
    teams = [TeamQuota("a", {"gpu": 8}, cohort="ab"), TeamQuota("b", {"gpu": 8}, cohort="ab")]
    return ClusterState(nodes(count), teams)


def borrowed(job_id: str, gpus: int, node: int, interval: float) -> Running:
    j = job(job_id, "b", gpus, limit=1000, preemptible=True, checkpoint_interval=interval)
    return Running(j, {node: gpus}, Tier.BORROWED, start=0.0)


def test_preemption_picks_least_lost_work() -> None:
    state = two_teams()
    state.admit(Running(job("b-own", "b", 8, preemptible=True), {0: 8}, Tier.GUARANTEED, 0.0))
    state.admit(borrowed("b-fresh", 4, 1, interval=100))  # at t=250: 50 s × 4 GPUs lost
    state.admit(borrowed("b-stale", 4, 1, interval=1000))  # at t=250: 250 s × 4 GPUs lost
    policy = Policy()
    queue = JobQueue(policy.config)
    queue.add(job("a1", "a", 4))
    decision = policy.schedule(state, queue, now=250.0)
    assert [(v.job.id, by) for v, by in decision.preempted] == [("b-fresh", "a1")]
    assert decision.admitted[0].alloc == {1: 4}
    # The victim's team is over its nominal: its resubmission borrows and never preempts back.
    victim = decision.preempted[0][0].job
    victim.preemptions += 1
    queue.remove({"a1"})
    queue.add(victim)
    again = policy.schedule(state, queue, now=260.0)
    assert again.preempted == [] and again.admitted == []


def test_preemption_rate_limit() -> None:
    state = two_teams()
    state.admit(Running(job("b-own", "b", 8, preemptible=True), {0: 8}, Tier.GUARANTEED, 0.0))
    for k in range(4):
        state.admit(borrowed(f"b{k}", 2, 1, interval=10))
    policy = Policy(PolicyConfig(preemption_budget=1, preemption_window=600))
    queue = JobQueue(policy.config)
    for k in range(3):
        queue.add(job(f"a{k}", "a", 2, submit_time=k))
    assert len(policy.schedule(state, queue, now=5.0).preempted) == 1
    queue.remove({"a0", "a1", "a2"} & set(state.running))
    assert policy.schedule(state, queue, now=100.0).preempted == []
    assert len(policy.schedule(state, queue, now=700.0).preempted) == 1  # the window moved on


def test_no_preemption_loops_in_simulation() -> None:
    rng = random.Random(5)
    jobs = [
        Job(
            f"j{k}",
            rng.choice("ab"),
            rng.choice((2, 4, 8)),
            time_limit=400.0,
            submit_time=float(k * 20),
            duration=float(rng.randint(50, 400)),
            preemptible=True,
            checkpoint_interval=60.0,
            grace=5.0,
        )
        for k in range(150)
    ]
    config = PolicyConfig(max_preemptions_per_job=2)
    teams = [TeamQuota("a", {"gpu": 8}, cohort="ab"), TeamQuota("b", {"gpu": 8}, cohort="ab")]
    simulation = Simulation(nodes(2), teams, config)
    records, _ = simulation.replay(jobs)
    assert all(r.finish is not None for r in records)
    assert max(r.preemptions for r in records) <= 2
    assert sum(r.preemptions for r in records) > 0, "the workload should exercise reclaim"
    assert all(r.finish >= r.submit + r.duration for r in records if r.finish is not None)


def test_configured_priority_class_preempts_lower_tier() -> None:
    # The production reserve is quota the team holds beyond what its one node can carry.
    state = ClusterState(nodes(1), [TeamQuota("a", {"gpu": 16})])
    own = job("own", gpus=8, preemptible=True)
    state.admit(Running(own, {0: 8}, Tier.GUARANTEED, start=0.0))
    classes = {"urgent": "production", "normal": "guaranteed"}
    policy = Policy(PolicyConfig(priority_classes=classes))
    queue = JobQueue(policy.config)
    queue.add(job("fire", gpus=8, priority="urgent"))
    decision = policy.schedule(state, queue, now=1.0)
    assert [(v.job.id, by) for v, by in decision.preempted] == [("own", "fire")]
    assert decision.admitted[0].tier == Tier.PRODUCTION
