"""The canary's eval gate on the eval platform: both versions' runs of the spec's eval tasks go
on the work queue, eval worker processes work them, and `evals.gate.judge` decides.

A rollout starts one `python -m shipyard.evals.worker MODEL` per version whose runs are not done
(a version evaluated before, by an earlier rollout or the trainer, costs nothing); each loads the
model artifact, not a replica, so the items and statistics are those of `shipyard eval run`, and
the results land in the same store (`shipyard eval report`, the console's eval pages). The
controller polls the workers from its loop and never blocks on them; they die with it.
"""

import os
import subprocess
import sys
from pathlib import Path

from shipyard import children
from shipyard.db import database_url, open_database
from shipyard.errors import InvalidInput, NotFound, ShipyardError
from shipyard.evals.gate import GateDecision, judge, pending, plan_gate, rescore
from shipyard.evals.store import ResultStore
from shipyard.queue import Queue
from shipyard.secretfile import ensure_private_dir
from shipyard.serve.deploy.spec import EvalGate


class GateRun:
    """One rollout's evaluation of `candidate` against `baseline` (model artifact ids)."""

    def __init__(self, gate: EvalGate, candidate: str, baseline: str, home: Path, logs: Path):
        self.gate, self.candidate, self.baseline = gate, candidate, baseline
        self.queue = Queue(open_database(database_url(home)))
        self.decision: GateDecision | None = None
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        try:
            self._start(home, logs)
        except BaseException:
            self.stop()
            self.queue.close()
            raise

    def _start(self, home: Path, logs: Path) -> None:
        models = list(dict.fromkeys([self.candidate, self.baseline]))
        try:
            plan_gate(self.queue, models, self.gate.tasks)
        except (InvalidInput, NotFound) as exc:  # a task file gone or broken since the spec
            raise InvalidInput(f"eval_gate.tasks: {exc}") from None
        ensure_private_dir(logs)
        env = {**os.environ, "SHIPYARD_HOME": str(home), "OMP_NUM_THREADS": "1"}
        env.update(MKL_NUM_THREADS="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
        for model in models:
            if pending(self.queue, model):
                with (logs / f"eval-{model[:12]}.log").open("ab") as log:
                    argv = [sys.executable, "-m", "shipyard.evals.worker", model]
                    self.workers[model] = children.spawn(
                        argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env
                    )

    def poll(self) -> GateDecision | None:
        """The decision once every worker has exited (None before). A version whose runs did not
        complete (a worker that failed, items dead in the queue) fails the gate, with why."""
        if self.decision is not None:
            return self.decision
        if any(proc.poll() is None for proc in self.workers.values()):
            return None
        failed = {m[:12]: p.returncode for m, p in self.workers.items() if p.returncode}
        self.stop()
        store = ResultStore(self.queue.db)
        tasks = self.gate.tasks
        try:
            for model in dict.fromkeys([self.candidate, self.baseline]):
                rescore(store, model, tasks)  # a scorer newer than stored results: re-judged
            self.decision = judge(
                store, self.candidate, self.baseline, tasks, self.gate.max_drop, self.gate.z
            )
        except ShipyardError as exc:
            said = f" (eval workers exited with {failed}; see serve/logs/eval-*.log)"
            self.decision = GateDecision(False, (), f"{exc}{said if failed else ''}")
        finally:
            self.queue.close()
        return self.decision

    def stop(self) -> None:
        """End the workers still running (a rollout stopped early, the controller closing)."""
        for proc in self.workers.values():
            children.stop(proc)
        self.workers.clear()
