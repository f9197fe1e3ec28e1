"""Kueue's documented borrowing, lending and reclaim examples give Kueue's outcomes."""

import pytest

from shipyard.errors import InvalidInput
from shipyard.scheduler import (
    ClusterState,
    Fit,
    JobQueue,
    Policy,
    PolicyConfig,
    QuotaBook,
    TeamQuota,
    Tier,
)

from .helpers import job, nodes


def admit_until_full(book: QuotaBook, team: str) -> int:
    used = 0
    while book.check(team, "gpu", 1) in (Fit.NOMINAL, Fit.BORROW):
        book.add(team, "gpu", 1)
        used += 1
    return used


def test_borrowing_limit_example() -> None:
    # Kueue docs: team-a-cq nominal 9, borrowingLimit 1; team-b-cq nominal 12; cohort team-ab.
    teams = [
        TeamQuota("a", {"gpu": 9}, cohort="ab", borrowing_limit={"gpu": 1}),
        TeamQuota("b", {"gpu": 12}, cohort="ab"),
    ]
    assert admit_until_full(QuotaBook(teams), "a") == 10  # 9 + 1 while team-b is idle
    assert admit_until_full(QuotaBook(teams), "b") == 21  # 12 + 9: no borrowing limit


def test_lending_limit_example() -> None:
    # Kueue docs (lendingLimit): team-a nominal 9 lends at most 1, so team-b reaches 12 + 1.
    teams = [
        TeamQuota("a", {"gpu": 9}, cohort="ab", lending_limit={"gpu": 1}),
        TeamQuota("b", {"gpu": 12}, cohort="ab"),
    ]
    book = QuotaBook(teams)
    assert admit_until_full(book, "b") == 13
    # The 8 GPUs team-a never lends stay available to it even with team-b at its maximum.
    assert book.check("a", "gpu", 8) is Fit.NOMINAL
    book.add("a", "gpu", 8)
    # The 9th was lent out: team-a may only get it back by reclaiming (preemption).
    assert book.check("a", "gpu", 1) is Fit.RECLAIM
    assert book.check("a", "gpu", 2) is Fit.NONE


def test_fit_kinds_and_no_cohort() -> None:
    book = QuotaBook([TeamQuota("solo", {"gpu": 4}), TeamQuota("x", {"gpu": 4}, cohort="c")])
    assert book.check("solo", "gpu", 4) is Fit.NOMINAL
    assert book.check("solo", "gpu", 5) is Fit.NONE  # no cohort: never borrows
    with pytest.raises(InvalidInput, match="team 'nobody' has no quota"):
        book.check("nobody", "gpu", 1)
    with pytest.raises(InvalidInput, match="lending_limit"):
        TeamQuota("bad", {"gpu": 1}, lending_limit={"gpu": 2})


def test_reclaim_preempts_borrowed_work() -> None:
    # Kueue reclaimWithinCohort: team-b borrowed team-a's idle quota; when team-a submits work
    # within its nominal quota, team-b's borrowing workloads are preempted and team-a admitted.
    teams = [TeamQuota("a", {"gpu": 8}, cohort="ab"), TeamQuota("b", {"gpu": 8}, cohort="ab")]
    state = ClusterState(nodes(2), teams)
    policy = Policy(PolicyConfig())
    queue = JobQueue(policy.config)
    for name in ("b1", "b2"):
        queue.add(job(name, "b", 8, preemptible=True, grace=5.0))
    first = policy.schedule(state, queue, now=0.0)
    tiers = sorted(run.tier for run in first.admitted)
    assert tiers == [Tier.GUARANTEED, Tier.BORROWED]
    queue.remove({run.job.id for run in first.admitted})
    queue.add(job("a1", "a", 8))
    second = policy.schedule(state, queue, now=10.0)
    assert [(v.tier, v.job.team) for v, by in second.preempted] == [(Tier.BORROWED, "b")]
    assert [r.job.id for r in second.admitted] == ["a1"]
    assert second.admitted[0].start == 15.0  # after the victim's grace period
    assert state.quota.used("b", "gpu") == 8 and state.quota.used("a", "gpu") == 8
