"""The controller end to end: real worker and reward processes, real SIGKILLs, a resumed
trainer, artifact weight sync, the code path through the sandbox, and quarantine."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from shipyard.errors import InvalidInput, NotFound
from shipyard.rl import Controller, RLConfig, checkpoint, metrics_text, report
from shipyard.rl.checkpoint import alias
from shipyard.rl.trajectory import QUARANTINED, SCORED
from shipyard.workspace import Workspace


def tiny(**overrides: Any) -> RLConfig:
    raw: dict[str, Any] = {
        "task": {"think_mean": 1.0, "think_max": 6, "heldout": 4},
        "model": {"vocab_size": 98, "d_model": 32, "n_layers": 1, "n_heads": 2, "seq_len": 40},
        "warmup": {"steps": 15, "batch": 16},
        "rollout": {
            "workers": 2,
            "group_size": 4,
            "prompts_per_step": 2,
            "max_new_tokens": 10,
            "token_budget": 2,
        },
        "trainer": {"steps": 6, "eta": 1},
    }
    for key, value in overrides.items():
        raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
    return RLConfig.from_dict(raw)


def run(cfg: RLConfig, hook: Any = None, resume: bool = False, **kw: Any) -> Controller:
    controller = Controller(cfg, hook=hook)
    try:
        controller.prepare(resume=resume)
        controller.run(**kw)
    finally:
        controller.close()
    return controller


def test_killed_worker_and_reward_service_lose_and_repeat_nothing(shipyard_home: Path) -> None:
    kills: list[str] = []

    def chaos(c: Controller, event: str) -> None:
        if event == "dispatch" and c.counters.dispatches == 3 and not kills:
            os.kill(c.workers[0].pid, signal.SIGKILL)  # holding a dispatch it never answers
            kills.append("worker")
        if event == "step" and c.version == 2:  # rollouts of the next versions in flight
            os.kill(c.reward.pid, signal.SIGKILL)
            kills.append("reward")

    c = run(tiny(), hook=chaos)
    assert "worker" in kills and "reward" in kills
    assert c.counters.worker_deaths >= 1 and c.counters.lost_dispatches >= 1
    assert c.reward.restarts >= 1
    assert c.version == 6
    consumed = c.buffer.consumed
    assert len(consumed) == len(set(consumed))  # nothing trained twice
    # Every trajectory ever admitted is in exactly one place: trained, still in the buffer,
    # quarantined, or dropped with its group (stale, or too few scored members).
    left = [t.uid for t in c.buffer.trajectories() + c.buffer.quarantine]
    placed = consumed + left + c.buffer.dropped
    admitted = [f"g{g}-{k}" for g in range(c.buffer.next_group) for k in range(4)]
    assert sorted(placed) == sorted(admitted)
    assert max(c.counters.staleness) <= 1  # eta
    partial = [t for t in c.buffer.trajectories() if t.segments > 1]
    for traj in partial:
        assert traj.versions == sorted(traj.versions) and len(traj.versions) == len(traj.tokens)
    text = report(c)
    assert text["faults"]["worker_deaths"] >= 1
    assert set(text["staleness_histogram"]) <= {"0", "1"}
    assert b"shipyard_rl_policy_version 6.0" in metrics_text(c)


def test_grpo_on_engine_rollouts_raises_the_reward(shipyard_home: Path) -> None:
    """Within the tests' budget: `planted-length` pays 1 for a completion of 12 characters or
    more, which the warmed-up policy writes now and then (a long thinking run); the trainer
    makes it the rule. Synchronous, so every rollout is the version being trained."""
    cfg = tiny(
        task={"env": "planted-length", "think_mean": 3.0, "think_max": 16},
        rollout={"group_size": 8, "max_new_tokens": 20, "token_budget": 8},
        trainer={"steps": 6, "eta": 0, "lr": 1e-3},
    )
    c = run(cfg)
    rewards = [h["reward"] for h in c.counters.history]
    assert len(rewards) == 6
    assert sum(rewards[-2:]) / 2 >= rewards[0] + 0.3, rewards
    assert max(c.counters.staleness) == 0


def test_an_evaluation_is_stamped_with_the_run_time_before_it(shipyard_home: Path) -> None:
    """Held-out evaluations are left out of the run's clock, their own point on the curve too."""
    c = Controller(tiny())
    c.started = time.monotonic()
    c._evaluate()
    c._evaluate()
    (_, first, _), (_, second, _) = c.accuracy
    assert first <= second <= c.elapsed()


def test_the_trainer_resumes_with_the_buffers_versions_intact(shipyard_home: Path) -> None:
    saved: dict[str, Any] = {}

    def remember(c: Controller, event: str) -> None:
        if event == "step":  # the checkpoint of this version was just cut
            saved.update(c.buffer.to_json())

    first = run(tiny(trainer={"steps": 3, "checkpoint_every": 1}), hook=remember)
    assert first.version == 3
    resumed = Controller(tiny(trainer={"steps": 5, "checkpoint_every": 1}))
    try:
        assert checkpoint.restore(resumed)
        assert resumed.version == 3
        restored = {t.uid: t for t in resumed.buffer.trajectories()}
        for item in saved["trajectories"]:
            traj = restored[item["uid"]]
            assert traj.versions == item["versions"] and traj.logprobs == item["logprobs"]
            assert traj.tokens == item["tokens"] and traj.status == item["status"]
        assert resumed.buffer.consumed == saved["consumed"]
        resumed.prepare(resume=True)
        resumed.run()
    finally:
        resumed.close()
    assert resumed.version == 5
    assert len(resumed.buffer.consumed) == len(set(resumed.buffer.consumed))
    assert resumed.buffer.consumed[: len(saved["consumed"])] == saved["consumed"]
    with _ws() as workspace:
        record = workspace.catalog.get_artifact(workspace.resolve(alias("rl")))
        assert record is not None and record.kind == "checkpoint"
        assert record.metadata["version"] == 5


def test_a_checkpoint_of_another_policy_shape_is_refused_by_name(shipyard_home: Path) -> None:
    """A run resumed with another model shape (or a checkpoint cut by an older Shipyard's
    policy) is refused with one line naming the checkpoint; the controller is left as built."""
    checkpoint.save(Controller(tiny()))
    other = Controller(tiny(model={"d_model": 16}))
    before = {k: v.clone() for k, v in other.model.state_dict().items()}
    with pytest.raises(InvalidInput, match=r"checkpoint rl-rl-checkpoint: its weights do not fit"):
        checkpoint.restore(other)
    assert other.version == 0
    after = other.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_artifact_sync_and_code_tasks_in_the_sandbox(shipyard_home: Path) -> None:
    controller = Controller(tiny(sync="artifact", trainer={"steps": 2, "eta": 0}))
    controller.code_every = 2  # every other group is a code task scored in the sandbox
    try:
        controller.prepare()
        controller.run()
    finally:
        controller.close()
    assert controller.version == 2
    assert controller.publisher is not None
    assert all(ref.startswith("artifact:") for ref in controller.publisher.refs.values())
    assert set(controller.counters.worker_versions.values()) <= {0, 1, 2}
    assert controller.monitor.scored["code"] >= 1  # scored (mostly 0: a tiny model's code)
    with _ws() as workspace:
        ref = controller.publisher.refs[2].removeprefix("artifact:")
        record = workspace.catalog.get_artifact(ref)
        assert record is not None and record.metadata["version"] == 2


def test_an_outage_quarantines_and_trains_on_nothing(shipyard_home: Path) -> None:
    """The reward service hangs (SIGSTOP): every request times out and is quarantined."""

    def hang(c: Controller, event: str) -> None:
        if event == "dispatch" and c.counters.dispatches == 1:
            os.kill(c.reward.pid, signal.SIGSTOP)

    cfg = tiny(reward={"timeout_s": 0.3, "window": 4}, trainer={"steps": 3})
    controller = Controller(cfg, hook=hang)
    try:
        controller.prepare()
        controller.run(deadline_s=3.0)
    finally:
        os.kill(controller.reward.pid, signal.SIGCONT)
        controller.close()
    c = controller
    assert c.version == 0  # no reward came back, so there was nothing to learn from
    everything = c.buffer.trajectories() + c.buffer.quarantine
    quarantined = [t for t in everything if t.status == QUARANTINED]
    assert quarantined and c.counters.quarantined["arith"] == len(quarantined)
    assert not [t for t in everything if t.status == SCORED]
    assert all(t.reward is None and "timeout" in t.meta["error"] for t in quarantined)
    assert c.counters.dropped_unscored >= 1 and not c.buffer.consumed
    assert [a.kind for a in c.monitor.alerts] == ["error-rate"]


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


class _ws:
    def __enter__(self) -> Workspace:
        self.workspace = Workspace.open()
        return self.workspace

    def __exit__(self, *exc: object) -> None:
        self.workspace.close()


TRAINER = """
import argparse, sys
from shipyard.cli import rl
parser = argparse.ArgumentParser()
rl.register(parser.add_subparsers(dest="command"))
args = parser.parse_args(["rl", "run", sys.argv[1]])
sys.exit(args.func(args))
"""


def test_a_sigkilled_trainer_resumes_from_its_checkpoint(
    shipyard_home: Path, tmp_path: Path
) -> None:
    cfg = tiny(trainer={"steps": 1000, "checkpoint_every": 2})
    config = tmp_path / "rl.json"
    config.write_text(json.dumps(cfg.to_dict()))
    trainer = subprocess.Popen(
        [sys.executable, "-c", TRAINER, str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        end = time.monotonic() + 120
        saved: dict[str, Any] | None = None
        while saved is None and time.monotonic() < end and trainer.poll() is None:
            with _ws() as workspace:
                try:
                    workspace.get(alias("rl"), tmp_path / "ckpt")
                    saved = json.loads((tmp_path / "ckpt" / "state.json").read_text())
                except NotFound:
                    time.sleep(0.1)
        assert saved is not None, "no checkpoint was cut"
        children = _children(trainer.pid)
        assert len(children) == 3  # two rollout workers and the reward service
    finally:
        trainer.send_signal(signal.SIGKILL)  # mid-run, rollouts and scores in flight
        trainer.wait()
    end = time.monotonic() + 30
    while any(_alive(pid) for pid in children) and time.monotonic() < end:
        time.sleep(0.05)
    assert not [pid for pid in children if _alive(pid)], "children outlived the trainer"
    # The alias may have moved past the copy read above before the kill: resume from the last.
    with _ws() as workspace:
        workspace.get(alias("rl"), tmp_path / "last")
    last = json.loads((tmp_path / "last" / "state.json").read_text())
    left_in_memory = list(Path("/dev/shm").glob(f"shipyard-rl-{trainer.pid}-*"))
    resumed = Controller(tiny(trainer={"steps": last["version"] + 2}))
    try:
        resumed.prepare(resume=True)
        assert not [p for p in left_in_memory if p.exists()]  # the dead run's versions
        assert resumed.version == last["version"] >= 2
        restored = {t.uid: t for t in resumed.buffer.trajectories()}
        assert len(restored) == len(last["buffer"]["trajectories"])
        for item in last["buffer"]["trajectories"]:
            assert restored[item["uid"]].versions == item["versions"]
        resumed.run()
    finally:
        resumed.close()
    assert resumed.version == last["version"] + 2
    assert len(resumed.buffer.consumed) == len(set(resumed.buffer.consumed))
