"""The controller: drives a run's state machine from its desired state in the catalog.

pending → starting → running → restarting → … → succeeded | failed. Every attempt gets a fresh
rendezvous (a new store on a new port, hosted by its rank 0) and new rank processes, taken from
warm spares; they restore the latest committed checkpoint, from the previous attempt's peer memory
when its survivors still hold it, else the newest stored one that verifies (a corrupt one is marked
by the rank that found it; the controller records each mark as a `corrupt-checkpoint` event naming
the file and piece). Chaos is armed once an attempt has completed its first step. Failures (a rank
exiting, a collective error, a hang, a NaN or loss spike) are counted in a sliding window; past
`max_failures` the run fails with the reason. The run row is saved every half second, so a
restarted controller re-attaches to live ranks. When the config names evals or a deployment, a
lifecycle agent child (train.lifecycle) evaluates, gates and rolls out each committed checkpoint;
the controller returns once the agent has finished with the final run's checkpoints.
"""

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from shipyard import children
from shipyard.checkpoint import corrupt_marks, latest_committed
from shipyard.train import forked, lifecycle
from shipyard.train.attempt import Attempt
from shipyard.train.chaos import Chaos
from shipyard.train.config import TrainConfig
from shipyard.train.detect import HangWatch, StragglerWatch, missing_ranks
from shipyard.train.faults import HANG_SIGNAL, SIGNALS
from shipyard.train.goodput import Ledger
from shipyard.train.heartbeat import Beat, Receiver
from shipyard.train.hooks import wired
from shipyard.train.metrics import MetricsServer, Sample
from shipyard.train.procid import ProcessId
from shipyard.train.ranks import RankProcess, SparePool, free_port, launch
from shipyard.train.report import metric_samples, mtbf
from shipyard.train.runs import finish_catalog_run, register_model
from shipyard.train.state import FINAL, RunTable
from shipyard.train.steplog import StepLog
from shipyard.train.worker import EXIT_ANOMALY, Assignment, checkpoint_root

SAVE_EVERY_S = 0.5
LINGER_S = 60.0  # the longest a previous attempt's survivors serve peer memory
AGENT_RESTART_S = 5.0  # a lifecycle agent that died is started again after this
AGENT_TRIES = 3  # ... but after the run's end, only this many times


class Controller:
    def __init__(self, run_id: str, *, attach: bool = False, say: Callable[[str], None] = print):
        self.table = RunTable()
        self.run = self.table.get(run_id)
        self.cfg = TrainConfig.from_dict(self.run.config)
        self.attach = attach
        self.say = say
        c, world = self.cfg.controller, self.run.world_size
        self.ledger = Ledger.from_dict(self.run.ledger) if self.run.ledger else Ledger()
        self.hang = HangWatch(c.hang_factor, c.hang_min_s, c.startup_timeout_s)
        self.stragglers = StragglerWatch(
            world, c.window_steps, c.straggler_factor, c.straggler_windows
        )
        self.chaos = Chaos(self.cfg.chaos, world)
        self.run_dir = Path(self.run.run_dir)
        recent = time.time() - c.failure_window_s
        self.failures = [e.at for e in self.table.events(run_id, "failure") if e.at >= recent]
        self.attempt: Attempt | None = None
        self.lingering: list[tuple[RankProcess, float]] = []
        self.drain: tuple[int, int] | None = None  # (straggler rank, checkpoint step when flagged)
        self.straggler_count = 0
        self.receiver = Receiver(self.run.heartbeat_port if attach else 0)
        # Sets of spares: one is warm while another warms up after a restart; more when
        # failures come faster than a spare warms up (seconds, on a busy host).
        fork = c.spares > 0 and forked.available()  # spares = 0: cold starts, as configured
        self.pool = SparePool(c.spares * world, self.run_dir / "logs", fork=fork)
        self.metrics = MetricsServer(self._samples, c.metrics_port) if c.metrics_port >= 0 else None
        self.steps = StepLog(self.run_dir / "steps.csv")
        self._saved_at = 0.0
        self.marks_seen = {
            (e.detail.get("step"), e.detail.get("marked_at"))
            for e in self.table.events(run_id, "corrupt-checkpoint")
        }
        # The lifecycle agent (evals, gate, rollout of each checkpoint) when the config names any.
        self.agent: subprocess.Popen[bytes] | None = None
        self._agent_died_at = 0.0

    # The loop

    def run_to_end(self, stop: Callable[[], bool] | None = None) -> str:
        """Drive the run until it succeeds or fails; returns the final state.

        `stop` (checked every tick) ends it early, as failed with the reason "stopped".
        """
        try:
            self.run.controller_pid = os.getpid()
            self.run.heartbeat_port = self.receiver.address[1]
            if self.run.state not in FINAL and not (self.attach and self._adopt()):
                self._launch([])
            while self.run.state not in FINAL:
                self._tick()
                self._keep_agent()
                if stop is not None and stop() and self.run.state not in FINAL:
                    self._finish("failed", "stopped by its caller")
            self._save()  # the agent reads the final state, then drains what is left
            self._drain_agent()
        finally:
            self._shutdown()
        return self.run.state

    def _tick(self) -> None:
        beats = self.receiver.drain(wait=min(self.cfg.controller.heartbeat_s, 0.05))
        for beat in beats:
            self._on_beat(beat)
        now = time.time()
        if self.attempt is None or self.run.state in FINAL:
            return
        self._check_exits(now)
        if self.run.state in ("starting", "running"):
            self._check_hang(now)
        if self.run.state == "running":
            self._inject(now)
            self._maybe_drain(now)
        self._reap_lingering(now)
        if now - self._saved_at > SAVE_EVERY_S:
            self._save()

    # The lifecycle agent

    def _keep_agent(self) -> bool:
        """Start the agent, and again when it died (after a pause, so a crash loop is slow);
        True once it finished (exit 0: the run is final and nothing is left to do)."""
        if not wired(self.cfg):
            return True
        if self.agent is not None:
            code = self.agent.poll()
            if code is None:
                return False
            children.reap(self.agent)
            self.agent = None
            if code == 0:
                return True
            self._agent_died_at = time.time()
            self.table.event(self.run.run_id, "lifecycle-exit", exit_code=code)
            self.say(f"lifecycle agent exited with {code}; see {self._agent_log()}")
        if time.time() - self._agent_died_at >= AGENT_RESTART_S:
            self.agent = lifecycle.start(self.run.run_id, self._agent_log())
        return False

    def _drain_agent(self) -> None:
        """Wait for the agent to finish the evals, gates and rollout of the run's checkpoints."""
        if not wired(self.cfg):
            return
        self.say("waiting for the evals of the run's checkpoints")
        exits = len(self.table.events(self.run.run_id, "lifecycle-exit"))
        while len(self.table.events(self.run.run_id, "lifecycle-exit")) - exits < AGENT_TRIES:
            if self._keep_agent():
                return
            time.sleep(0.2)
        self.say(f"lifecycle agent failed {AGENT_TRIES} times; see {self._agent_log()}")

    def _agent_log(self) -> Path:
        return self.run_dir / "logs" / "lifecycle.log"

    def _reap_lingering(self, now: float) -> None:
        for rank, deadline in self.lingering:
            if deadline <= now:
                rank.kill()
        self.lingering = [(r, t) for r, t in self.lingering if t > now]

    # Heartbeats

    def _on_beat(self, beat: Beat) -> None:
        a = self.attempt
        if a is None or beat.attempt != a.number:
            return
        a.record(beat)
        if beat.kind == "ready":
            self._report_corrupt()
            where = {"rank": beat.rank, "step": beat.step, **beat.fields}
            self.table.event(self.run.run_id, "ready", attempt=a.number, **where)
        if beat.kind == "step":
            self._on_step(a, beat)
        if self.run.state == "starting" and a.global_step() >= 0:
            self._set_state("running")
            self.hang.reset(time.time())

    def _on_step(self, a: Attempt, beat: Beat) -> None:
        f = beat.fields
        self.steps.write(a.number, beat)
        self._watch_stragglers(beat)
        if beat.rank == 0:
            self.ledger.step(beat.step, f["step_time"], f["data_wait"], f["stall"], beat.at)
            committed = int(f["committed"])
            if committed < self.run.checkpoint_step:  # the newest was refused: say why
                self._report_corrupt()
            self.ledger.commit(committed)
            self.run.step, self.run.checkpoint_step = beat.step, committed
        now = time.time()
        self.hang.observe(a.global_step(), now, float(f["step_time"]) if beat.rank == 0 else None)
        if beat.rank == 0 and not a.training:
            a.training = True
            # The new attempt is past its restore: the old survivors may go, and new spares
            # warm up now (not during the restart, which they would slow down).
            for rank, _ in self.lingering:
                rank.kill()
            self.lingering = []
            self.pool.fill()
            # Faults strike an attempt that is training: one that has not yet completed a step
            # would leave no step to measure its restart by.
            self.chaos.arm(time.time())

    # Failure detection

    def _watch_stragglers(self, beat: Beat) -> None:
        """Compare the ranks' work times, window by window; not while a spare warms up, taking
        CPU from the ranks beside it (on two cores a healthy replacement read slow)."""
        if self.run.world_size < 2:
            return  # a lone rank has no peers to be slower than
        if self.pool.warming():
            self.stragglers.reset()  # judged afresh from the first whole window after
            return
        work_time = float(beat.fields["work_time"])
        for found in self.stragglers.observe(beat.rank, beat.step - 1, work_time):
            detail = {"rank": found.rank, "window": found.window, "ratio": found.ratio}
            self.table.event(self.run.run_id, "straggler", **detail)
            self.straggler_count += 1
            self.say(f"straggler: rank {found.rank} at {found.ratio:.2f}× the median work time")
            if self.cfg.controller.spares and self.drain is None:
                self.drain = (found.rank, self.run.checkpoint_step)

    def _check_exits(self, now: float) -> None:
        a = self.attempt
        assert a is not None
        codes = a.exit_codes()
        if all(code is None for code in codes):
            return
        finished = self._committed() >= self.cfg.train.steps
        if finished and all(code in (0, -1) for code in codes):  # -1: adopted, code unknown
            self._succeed()
            return
        # An adopted rank (-1) that said it was done, or after the final commit, exited cleanly.
        failed = [
            r
            for r, code in enumerate(codes)
            if code not in (None, 0) and not (code == -1 and (r in a.done or finished))
        ]
        if failed:
            kind = "anomaly" if EXIT_ANOMALY in codes else "crash"
            self._failure(kind, now, now, ranks=failed, exit_codes=codes)
        elif a.lost:
            self._failure("collective-error", now, now, ranks=sorted(a.lost), errors=a.lost)

    def _check_hang(self, now: float) -> None:
        a = self.attempt
        assert a is not None
        if self.run.state == "starting":
            if now - a.started_at > self.cfg.controller.startup_timeout_s:
                self._failure("startup-timeout", a.started_at, now, ready=sorted(a.steps))
            return
        if a.global_step() >= self.cfg.train.steps:
            return  # finishing: the final save and exit are waited for, not timed
        stalled = self.hang.stalled_for(now)
        if stalled is None:
            return
        entered = a.entered_all()
        pending, missing = missing_ranks(entered)
        stacks = a.dump_stacks(self.run_dir)
        self.table.event(
            self.run.run_id,
            "hang",
            stalled_s=stalled,
            threshold_s=self.hang.threshold(),
            heartbeat_s=self.cfg.controller.heartbeat_s,
            pending=list(pending),
            missing=missing,
            entered={str(r): list(v) for r, v in entered.items()},
            stacks=stacks,
        )
        self.say(f"hang: no progress for {stalled:.2f}s; rank(s) {missing} never entered {pending}")
        self._failure("hang", self.hang.since, now, ranks=missing)

    # Reactions

    def _failure(self, kind: str, failed_at: float, now: float, **detail: object) -> None:
        a = self.attempt
        assert a is not None
        c = self.cfg.controller
        committed = self._committed()
        self.ledger.interrupt(failed_at, now, committed)
        self.failures = [t for t in self.failures if now - t <= c.failure_window_s] + [now]
        self.table.event(
            self.run.run_id,
            "failure",
            kind=kind,
            attempt=a.number,
            step=a.global_step(),
            committed=committed,
            detection_s=now - failed_at,
            **detail,
        )
        self.say(f"failure: {kind} in attempt {a.number} ({detail}); committed step {committed}")
        self._report_corrupt()
        self.chaos.disarm()
        if kind == "anomaly":
            self._rollback(a, committed)
        if len(self.failures) > c.max_failures:
            a.kill()
            self._finish(
                "failed",
                f"{len(self.failures)} failures within {c.failure_window_s:g}s "
                f"(max_failures {c.max_failures}); the last was {kind}: {detail}",
            )
            return
        self._restart(a, peers=a.peer_list() if kind != "anomaly" else [])

    def _restart(self, a: Attempt, peers: list[str]) -> None:
        """Survivors linger (serving peer memory) until the next attempt has restored."""
        self._set_state("restarting")
        deadline = time.time() + LINGER_S
        for rank in a.ranks:
            if peers and rank.exit_code() is None:
                rank.signal(HANG_SIGNAL)  # a healthy survivor (a drain) must not train on
                self.lingering.append((rank, deadline))
            else:
                rank.kill()
        self._launch(peers)

    def _rollback(self, a: Attempt, committed: int) -> None:
        anomaly = a.anomaly_record(self.run_dir)
        if anomaly is None:
            self.table.event(self.run.run_id, "rollback", skip=None, to_step=committed)
            return
        start = int(str(anomaly["data_step"]))
        window = [start, start + self.cfg.controller.skip_steps]
        if window not in self.run.skips:
            self.run.skips.append(window)
        self.run.lr_scale *= self.cfg.controller.lr_scale_on_spike
        self.table.event(
            self.run.run_id,
            "rollback",
            skip=window,
            to_step=committed,
            loss=anomaly.get("loss"),
            lr_scale=self.run.lr_scale,
        )
        self.say(f"rollback to step {committed}, skipping data steps {window}")

    def _maybe_drain(self, now: float) -> None:
        """A flagged straggler is replaced by a spare at the next checkpoint (no work lost)."""
        a = self.attempt
        if self.drain is None or a is None or self.run.checkpoint_step <= self.drain[1]:
            return
        if self.run.checkpoint_step >= self.cfg.train.steps:
            self.drain = None  # finished: nothing left to drain for
            return
        rank, _ = self.drain
        self.drain = None
        self.table.event(self.run.run_id, "drain", rank=rank, at_step=self.run.checkpoint_step)
        self.say(f"drain: replacing straggler rank {rank} at step {self.run.checkpoint_step}")
        self.ledger.interrupt(now, now, self.run.checkpoint_step, failure=False)
        self.chaos.disarm()
        self._restart(a, a.peer_list())

    def _inject(self, now: float) -> None:
        due = self.chaos.due(now)
        a = self.attempt
        if due is None or a is None:
            return
        kind, rank = due
        self.table.event(self.run.run_id, "chaos", kind=kind, rank=rank, attempt=a.number)
        self.say(f"chaos: {kind} on rank {rank}")
        a.ranks[rank].signal(signal.SIGKILL if kind == "kill" else SIGNALS[kind])
        if kind == "straggler":
            self.chaos.arm(now)  # the attempt goes on; the next fault is independent

    # Attempts

    def _launch(self, peers: list[str]) -> None:
        self.run.attempt += 1
        port = free_port()
        job = Assignment(
            run_dir=str(self.run_dir),
            config=self.run.config,
            data_path=self.run.data_path,
            rank=0,
            world_size=self.run.world_size,
            attempt=self.run.attempt,
            store_port=port,
            heartbeat_port=self.receiver.address[1],
            peers=peers,
            skips=self.run.skips,
            lr_scale=self.run.lr_scale,
            mtbf_s=mtbf(self.run, self.ledger, time.time()),
        )
        warm = self.pool.warm()
        ranks = launch(self.pool, job)
        if self.pool.fork:  # a fork costs milliseconds: replace what was taken before it is needed
            self.pool.fill()
        self.attempt = Attempt(self.run.attempt, ranks)
        self.run.rank_pids = [r.ident.to_record() for r in ranks]
        self.hang.reset(time.time())
        self.stragglers.reset()
        self.table.event(
            self.run.run_id,
            "launch",
            attempt=self.run.attempt,
            store_port=port,
            pids=self.run.rank_pids,
            peer_restore=bool(peers),
            cold_ranks=max(0, self.run.world_size - warm),  # not warm: waits for a warm-up
            skips=self.run.skips,
        )
        self._set_state("starting")

    def _adopt(self) -> bool:
        """Re-attach to the ranks a previous controller left running; False if they are gone."""
        if self.run.state not in ("starting", "running", "restarting") or not self.run.rank_pids:
            return False
        # A rank that is not the very process launched (pid reused, or a record without its
        # start time) counts as gone, and is never signalled.
        ranks = [RankProcess(ProcessId.from_record(r)) for r in self.run.rank_pids]
        alive = [r.exit_code() is None for r in ranks]
        finished = self._committed() >= self.cfg.train.steps
        self.table.event(self.run.run_id, "attach", pids=self.run.rank_pids, alive=alive)
        if not all(alive) and not finished:
            for rank in ranks:
                rank.kill()
            self.say("attach: the previous controller's ranks are gone; restarting")
            return False
        self.attempt = Attempt(self.run.attempt, ranks)
        self.hang.reset(time.time())
        self.say(f"attach: adopted attempt {self.run.attempt} (pids {self.run.rank_pids})")
        return True

    def _samples(self) -> list[Sample]:
        per_rank = self.attempt.rank_times() if self.attempt else {}
        return metric_samples(self.run, per_rank, self.straggler_count)

    def _committed(self) -> int:
        # Bookkeeping, often: sizes and corrupt marks only; the ranks verify what they load.
        found = latest_committed(checkpoint_root(self.run_dir), verify=False)
        return found.manifest.step if found else 0

    def _report_corrupt(self) -> None:
        """One event per checkpoint a rank marked corrupt: its step, file and piece."""
        for mark in corrupt_marks(checkpoint_root(self.run_dir)):
            key = (mark.get("step"), mark.get("marked_at"))
            if key in self.marks_seen:
                continue
            self.marks_seen.add(key)
            attempt = self.attempt.number if self.attempt else self.run.attempt
            self.table.event(self.run.run_id, "corrupt-checkpoint", attempt=attempt, **mark)
            self.say(
                f"corrupt checkpoint of step {mark.get('step')}: {mark.get('file')}, "
                f"piece {mark.get('piece')!r}; recovering from an earlier one"
            )

    # Endings and bookkeeping

    def _succeed(self) -> None:
        self.ledger.commit(self.cfg.train.steps)
        self.run.step = self.run.checkpoint_step = self.cfg.train.steps
        self.run.model_id = register_model(self.run, self.cfg, {"attempts": self.run.attempt + 1})
        self._finish("succeeded", "")

    def _finish(self, state: str, reason: str) -> None:
        self.run.reason = reason
        self._set_state(state)
        finish_catalog_run(self.run.run_id, state == "succeeded")
        self.say(f"{state}{': ' + reason if reason else ''}")

    def _set_state(self, state: str) -> None:
        self.run.state = state
        self.table.event(self.run.run_id, "state", state=state, attempt=self.run.attempt)
        self._save()

    def _save(self) -> None:
        self.run.ledger = self.ledger.to_dict()
        self.table.save(self.run)
        self.steps.flush()
        self._saved_at = time.time()

    def _shutdown(self) -> None:
        if self.agent is not None:  # interrupted: a new controller starts another
            children.stop(self.agent)
        if self.run.state in FINAL:
            if self.attempt is not None:
                self.attempt.kill()
            for rank, _ in self.lingering:
                rank.kill()
        self.pool.close()
        self.receiver.close()
        if self.metrics is not None:
            self.metrics.close()
        self._save()
        self.steps.close()
        self.table.close()
