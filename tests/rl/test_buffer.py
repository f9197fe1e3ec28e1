"""The buffer: staleness never above η over any schedule; version tags survive partial rollouts
and checkpoints; a released dispatch's late answer never lands."""

import json
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from shipyard.rl.buffer import Buffer
from shipyard.rl.config import TaskConfig
from shipyard.rl.tasks import arith_problem
from shipyard.rl.trajectory import GENERATING, SCORED, SCORING

TASK = TaskConfig()
PROBLEM = arith_problem(TASK, 0)


def _score_all(buffer: Buffer) -> None:
    for traj in buffer.trajectories():
        if traj.status == SCORING:
            traj.status, traj.reward = SCORED, 1.0


@settings(max_examples=40, deadline=None)
@given(
    eta=st.integers(0, 3),
    per_step=st.integers(1, 3),
    seed=st.integers(0, 10_000),
    lag=st.integers(0, 4),
)
def test_trained_staleness_never_exceeds_eta(eta: int, per_step: int, seed: int, lag: int) -> None:
    """Workers serve versions up to `lag` behind, finish segments in random order and split
    rollouts into random segments; the trainer takes whatever groups are complete."""
    rng = random.Random(seed)
    buffer = Buffer(group_size=2)
    version, dispatch, trained = 0, 0, []
    for _ in range(150):
        while buffer.admitted < (version + eta + 1) * per_step:
            buffer.admit(PROBLEM)
        open_ = buffer.unassigned(4)
        if open_:
            dispatch += 1
            chosen = rng.sample(open_, rng.randint(1, len(open_)))
            buffer.assign(chosen, dispatch)
            served = max(0, version - rng.randint(0, lag))
            for traj in chosen:
                done = rng.random() < 0.5
                buffer.accept(dispatch, traj.uid, [5], [-0.1], served, done)
        _score_all(buffer)
        if buffer.complete_groups() >= per_step or rng.random() < 0.2:
            batch = buffer.take(version, eta, per_step)
            if batch.groups:
                assert max(batch.staleness) <= eta
                for group in batch.groups:
                    assert all(t.staleness(version) <= eta for t in group)
                trained += [t.uid for g in batch.groups for t in g]
                version += 1
    assert len(trained) == len(set(trained)) == len(buffer.consumed)


def test_version_tags_survive_partial_rollouts_and_a_checkpoint() -> None:
    buffer = Buffer(group_size=2)
    group = buffer.admit(arith_problem(TASK, 0))
    uid = group[0].uid
    for dispatch, (version, tokens, done) in enumerate(
        [(0, [7, 8, 9], False), (1, [10], False), (3, [11, 12], True)], start=1
    ):
        buffer.assign([buffer.find(uid)], dispatch)  # type: ignore[list-item]
        assert buffer.accept(dispatch, uid, tokens, [-0.5] * len(tokens), version, done)
    traj = buffer.find(uid)
    assert traj is not None
    assert traj.versions == [0, 0, 0, 1, 3, 3] and traj.segments == 3
    assert traj.tokens == [7, 8, 9, 10, 11, 12] and traj.status == SCORING
    assert traj.staleness(4) == 4
    again = Buffer.from_json(json.loads(json.dumps(buffer.to_json())))
    restored = again.find(uid)
    assert restored is not None and restored.versions == traj.versions
    assert restored.logprobs == traj.logprobs and restored.problem == traj.problem
    assert again.find(group[1].uid).status == GENERATING  # type: ignore[union-attr]
    assert not again.assigned  # nothing in flight after a restore: handed out again


def test_a_released_dispatch_cannot_land_twice() -> None:
    buffer = Buffer(group_size=2)
    trajs = buffer.admit(arith_problem(TASK, 0))
    buffer.assign(trajs, 1)
    assert buffer.release(1) == 2  # its worker died
    buffer.assign(trajs, 2)  # handed out again
    assert buffer.accept(1, trajs[0].uid, [5], [-1.0], 0, True) is None  # the dead one's answer
    assert buffer.accept(2, trajs[0].uid, [6], [-1.0], 0, True) is not None
    assert buffer.accept(2, trajs[0].uid, [6], [-1.0], 0, True) is None  # a repeat
    assert trajs[0].tokens == [6]


def test_a_group_staler_than_eta_is_dropped_and_its_slot_readmitted() -> None:
    buffer = Buffer(group_size=2)
    group = buffer.admit(arith_problem(TASK, 0))
    for k, traj in enumerate(group):
        buffer.assign([traj], k)
        buffer.accept(k, traj.uid, [5], [-1.0], 0, True)
    _score_all(buffer)
    batch = buffer.take(version=2, eta=1, count=1)
    assert not batch.groups and batch.dropped_stale == 1 and buffer.admitted == 0
    assert not buffer.consumed and sorted(buffer.dropped) == sorted(t.uid for t in group)
