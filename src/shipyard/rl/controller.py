"""The controller: admits prompts, dispatches rollouts, scores, trains and publishes weights.

One loop in one process drives everything (the workers and the reward service are processes of
their own). Admission bounds staleness at the source: a group may start only while fewer than
(version + η + 1) × prompts_per_step groups have been admitted, so with η = 0 a step's rollouts
all start from the version being trained (synchronous), and with η > 0 workers run ahead by up
to η versions while the trainer trains. The trainer still checks every group and drops one
staler than η (`Buffer.take`): staleness never exceeds η, whatever the order of completion.
"""

import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

import torch

from shipyard.errors import StorageError
from shipyard.rl import checkpoint
from shipyard.rl.buffer import Buffer
from shipyard.rl.config import RLConfig
from shipyard.rl.grpo import StepStats, train_step
from shipyard.rl.monitor import RewardMonitor
from shipyard.rl.policy import build, load_weights, prompt_row
from shipyard.rl.report_stats import quantiles
from shipyard.rl.reward import RewardService
from shipyard.rl.tasks import arith_problem, code_problem
from shipyard.rl.trajectory import QUARANTINED, SCORED, SCORING
from shipyard.rl.warmup import heldout_accuracy, warmup
from shipyard.rl.weights import Publisher
from shipyard.rl.worker import WorkerHandle

RECENT_TOKENS = 100_000
MAX_RESTARTS = 10  # per worker: a worker that cannot live is a bug to report, not to retry
Hook = Callable[["Controller", str], None]  # called with an event name: "dispatch", "step"


@dataclass
class Counters:
    dispatches: int = 0
    rollout_tokens: int = 0
    rollout_s: float = 0.0
    train_tokens: int = 0
    train_s: float = 0.0
    train_cpu_s: float = 0.0  # the trainer thread's CPU time: wall minus this is waiting for a core
    rollout_cpu_s: float = 0.0
    trainer_idle_s: float = 0.0
    worker_deaths: int = 0
    lost_dispatches: int = 0
    dropped_stale: int = 0
    dropped_unscored: int = 0
    quarantined: Counter[str] = field(default_factory=Counter)
    staleness: Counter[int] = field(default_factory=Counter)
    history: list[dict[str, Any]] = field(default_factory=list)
    # The last RECENT_TOKENS tokens' values: a long run's report stays bounded.
    is_ratio: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_TOKENS))
    logp_diff: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_TOKENS))
    sync_s: list[float] = field(default_factory=list)  # a worker's load of a new version
    worker_versions: dict[int, int] = field(default_factory=dict)


class Controller:
    def __init__(self, cfg: RLConfig, hook: Hook | None = None) -> None:
        self.cfg = cfg
        self.hook = hook
        torch.set_num_threads(1)
        self.model = build(cfg.model, cfg.seed)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.trainer.lr)
        self.buffer = Buffer(cfg.rollout.group_size)
        self.monitor = RewardMonitor(cfg.reward)
        self.counters = Counters()
        self.version = 0
        self.warmup_accuracy: float | None = None
        self.accuracy: list[tuple[int, float, float]] = []  # (version, seconds, accuracy)
        self.workers = [WorkerHandle(i, cfg) for i in range(cfg.rollout.workers)]
        self.reward = RewardService(cfg.reward.threads, cfg.reward.timeout_s, cfg.reward.sandbox)
        self.publisher: Publisher | None = None
        self.ref = ""
        self.started = 0.0
        self.eval_s = 0.0  # held-out evaluation, left out of the run's clock
        self.code_every = 0  # admit a code problem every N groups (0 = never)

    # Setup

    def prepare(self, resume: bool = False, init: Path | None = None) -> None:
        """Warm up (or restore the last checkpoint, or load warmed-up weights from `init`),
        then start the pools."""
        restored = checkpoint.restore(self) if resume else False
        if not restored:
            if init is not None:
                load_weights(self.model, init)
            else:
                warmup(self.model, self.cfg)
            self.warmup_accuracy = heldout_accuracy(self.model, self.cfg)
        self.publisher = Publisher(self.cfg.sync, self.cfg.name)
        self.ref = self.publisher.push(self.model, self.version)
        for worker in self.workers:
            worker.start()
        self.reward.start()
        for traj in self.buffer.trajectories():
            if traj.status == SCORING:  # its answer was in flight when the checkpoint was cut
                self._submit(traj.uid)

    def close(self) -> None:
        for worker in self.workers:
            worker.stop()
        self.reward.stop()
        if self.publisher is not None:
            self.publisher.close()

    # The loop

    def run(self, deadline_s: float | None = None) -> None:
        """Train until `trainer.steps` versions, or `deadline_s` (default `trainer.deadline_s`,
        0 = none) seconds of run time: a reward outage stalls training rather than feeding it
        zeros, and the deadline is what ends a stalled run."""
        if deadline_s is None and self.cfg.trainer.deadline_s:
            deadline_s = self.cfg.trainer.deadline_s
        self.started = time.monotonic()
        while self.version < self.cfg.trainer.steps:
            if deadline_s is not None and self.elapsed() > deadline_s:
                break
            self._admit()
            self._dispatch()
            batch_ready = self.buffer.complete_groups() >= self.cfg.rollout.prompts_per_step
            if batch_ready and self._train():
                continue
            idle = time.monotonic()
            self._wait(0.05)
            self.counters.trainer_idle_s += time.monotonic() - idle
            self._collect()
        if self.cfg.trainer.eval_every == 0 or self.version % self.cfg.trainer.eval_every:
            self._evaluate()

    def _admit(self) -> None:
        per = self.cfg.rollout.prompts_per_step
        while self.buffer.admitted < (self.version + self.cfg.trainer.eta + 1) * per:
            index = self.buffer.next_group
            if self.code_every and index % self.code_every == self.code_every - 1:
                self.buffer.admit(code_problem("double"))
            else:
                self.buffer.admit(arith_problem(self.cfg.task, index))

    def _dispatch(self) -> None:
        # Two dispatches queued per worker keep it decoding while the trainer trains; with η = 0
        # admission leaves nothing to queue, so the second never waits on a stale version.
        for worker in self.workers:
            while len(worker.inflight) < 2:
                trajs = self.buffer.unassigned(self.cfg.rollout.group_size)
                if not trajs:
                    return
                self.counters.dispatches += 1
                dispatch = self.counters.dispatches
                message = {
                    "dispatch": dispatch,
                    "version": self.version,
                    "ref": self.ref,
                    "uids": [t.uid for t in trajs],
                    "rows": [prompt_row(t.prompt) + t.tokens for t in trajs],
                    "generated": [len(t.tokens) for t in trajs],
                }
                if not worker.send(message):
                    break
                self.buffer.assign(trajs, dispatch)
                if self.hook:
                    self.hook(self, "dispatch")

    def _wait(self, timeout: float) -> None:
        conns: list[Any] = [w.conn for w in self.workers if w.conn is not None]
        if self.reward.connection is not None:
            conns.append(self.reward.connection)
        wait(conns, timeout)

    def _collect(self) -> None:
        for worker in self.workers:
            replies, closed = worker.receive()
            for reply in replies:
                self._apply(worker, reply)
            if closed or not worker.process.is_alive():
                self.counters.worker_deaths += 1
                if worker.restarts >= MAX_RESTARTS:
                    raise StorageError(
                        f"rollout worker {worker.index} died {worker.restarts + 1} times "
                        f"(last exit code {worker.process.exitcode}); giving up"
                    )
                for dispatch in worker.restart():
                    self.counters.lost_dispatches += 1
                    self.buffer.release(dispatch)
        for answer in self.reward.poll():
            traj = self.buffer.find(answer.uid)
            if traj is None or traj.status != SCORING:
                continue
            self.monitor.observe(answer.env, answer.reward, len(traj.tokens))
            if answer.reward is None:
                traj.status = QUARANTINED  # an outage is not a learning signal
                traj.meta = {"error": answer.error}
                self.counters.quarantined[answer.env] += 1
            else:
                traj.status, traj.reward, traj.meta = SCORED, answer.reward, answer.meta

    def _apply(self, worker: WorkerHandle, reply: dict[str, Any]) -> None:
        dispatch = reply["dispatch"]
        if dispatch in worker.inflight:
            worker.inflight.remove(dispatch)
        worker.version = reply["version"]
        self.counters.worker_versions[worker.index] = reply["version"]
        worker.busy_s += reply["gen_s"] + reply["sync_s"]
        if reply["sync_s"]:
            self.counters.sync_s.append(reply["sync_s"])
        self.counters.rollout_s += reply["gen_s"]
        self.counters.rollout_cpu_s += reply["gen_cpu_s"]
        for uid, tokens, logprobs, finished in reply["items"]:
            traj = self.buffer.accept(dispatch, uid, tokens, logprobs, reply["version"], finished)
            if traj is None:
                continue
            worker.tokens += len(tokens)
            self.counters.rollout_tokens += len(tokens)
            if finished:
                self._submit(uid)

    def _submit(self, uid: str) -> None:
        traj = self.buffer.find(uid)
        assert traj is not None
        self.reward.submit(uid, traj.problem.env, traj.completion, traj.problem.entry)

    def _train(self) -> bool:
        cfg = self.cfg
        batch = self.buffer.take(self.version, cfg.trainer.eta, cfg.rollout.prompts_per_step)
        self.counters.dropped_stale += batch.dropped_stale
        self.counters.dropped_unscored += batch.dropped_unscored
        if not batch.groups:
            return False
        start, cpu = time.perf_counter(), time.thread_time()
        stats: StepStats = train_step(self.model, self.optimizer, batch.groups, cfg.trainer)
        self.counters.train_s += time.perf_counter() - start
        self.counters.train_cpu_s += time.thread_time() - cpu
        self.counters.train_tokens += stats.tokens
        self.counters.staleness.update(batch.staleness)
        self.counters.is_ratio.extend(stats.is_ratio)
        self.counters.logp_diff.extend(stats.logp_diff)
        self.version += 1
        assert self.publisher is not None
        self.ref = self.publisher.push(self.model, self.version)
        rewards = [t.reward for g in batch.groups for t in g if t.status == SCORED]
        self.counters.history.append(
            {
                "version": self.version,
                "seconds": round(self.elapsed(), 3),
                "reward": sum(r or 0.0 for r in rewards) / max(1, len(rewards)),
                "length": stats.length_mean,
                "staleness": dict(batch.staleness),
                "clip_fraction": stats.clip_fraction,
                "importance_ratio_p99": quantiles(stats.is_ratio).get("p99", 1.0),
                "logprob_diff_abs_mean": sum(map(abs, stats.logp_diff)) / max(1, stats.tokens),
            }
        )
        every = cfg.trainer.eval_every
        if every and self.version % every == 0:
            self._evaluate()
        if cfg.trainer.checkpoint_every and self.version % cfg.trainer.checkpoint_every == 0:
            checkpoint.save(self)
        if self.hook:
            self.hook(self, "step")
        return True

    def elapsed(self) -> float:
        """Seconds of the run so far, held-out evaluations left out."""
        return time.monotonic() - self.started - self.eval_s

    def _evaluate(self) -> None:
        start = time.monotonic()
        at = start - self.started - self.eval_s  # the run's time when the evaluation began
        accuracy = heldout_accuracy(self.model, self.cfg)
        self.accuracy.append((self.version, at, accuracy))
        self.eval_s += time.monotonic() - start
