"""`python -m shipyard.train.lifecycle RUN_ID`: a run's lifecycle agent, its controller's child.

When a run's config names evals or a deployment, the controller starts one agent (and a new one
if it dies; it dies with the controller). Every half second the agent publishes the committed
checkpoints, imports and enqueues their evals on the work queue (train.evalhook), works the
queues one model at a time with an eval worker child (`python -m shipyard.evals.worker`), judges
each checkpoint whose evals are complete and rolls the newest that passed out (train.promote).
All its state is in the database (run events, the trigger table, the queue, the result store),
so an agent started after a crash carries on where the last one stopped. Once the run is final
and nothing is left to do, it exits 0; the controller waits for that before it returns.
"""

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from shipyard import children
from shipyard.errors import ShipyardError
from shipyard.queue import open_queue
from shipyard.train.config import TrainConfig
from shipyard.train.evalhook import enqueue_new, publish_new
from shipyard.train.promote import deployed_model, judge_ready, queued, roll_out
from shipyard.train.state import FINAL, RunTable
from shipyard.workspace import Workspace

POLL_S = 0.5
WORKER_TRIES = 3  # eval worker exits on one model before its evals are given up


def start(run_id: str, log: Path) -> "subprocess.Popen[bytes]":
    """Start a run's agent; it dies with this process."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        argv = [sys.executable, "-m", "shipyard.train.lifecycle", run_id]
        return children.spawn(argv, env=_env(), stdout=out, stderr=out)


def _env() -> dict[str, str]:
    pinned = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    return {**os.environ, **pinned, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"}


class Agent:
    def __init__(self, run_id: str, log: IO[bytes] | int | None = None) -> None:
        self.run_id, self.log = run_id, log
        self.table, self.ws, self.queue = RunTable(), Workspace.open(), open_queue()
        self.worker: tuple[str, subprocess.Popen[bytes]] | None = None

    def close(self) -> None:
        if self.worker is not None:
            children.stop(self.worker[1])
        self.queue.close()
        self.ws.close()
        self.table.close()

    def step(self) -> bool:
        """One pass; True when the run is final and nothing is left to do."""
        run = self.table.get(self.run_id)
        final = run.state in FINAL  # read first: what is committed before it is published now
        cfg = TrainConfig.from_dict(run.config)
        busy = publish_new(self.table, run) > 0
        busy |= bool(enqueue_new(self.ws, self.queue, self.table, run))
        models = self._models(cfg)
        given_up = {m for m, n in self._worker_exits().items() if n >= WORKER_TRIES}
        if cfg.deploy.deployment:
            busy |= judge_ready(self.ws, self.queue, self.table, run, given_up) > 0
            busy |= not roll_out(self.table, run)
        busy |= self._work([m for m in models if m not in given_up])
        gates_left = cfg.deploy.deployment and len(self._steps("gate")) < len(
            self._steps("evals-enqueued")
        )
        return final and not busy and not gates_left

    def _steps(self, kind: str) -> set[int]:
        return {int(e.detail["step"]) for e in self.table.events(self.run_id, kind)}

    def _worker_exits(self) -> dict[str, int]:
        exits: dict[str, int] = {}
        for e in self.table.events(self.run_id, "eval-worker-exit"):
            exits[str(e.detail["model"])] = exits.get(str(e.detail["model"]), 0) + 1
        return exits

    def _models(self, cfg: TrainConfig) -> list[str]:
        """The models to evaluate: the checkpoints' in step order, then the baseline."""
        enqueued = self.table.events(self.run_id, "evals-enqueued")
        models = [str(e.detail["model"]) for e in sorted(enqueued, key=lambda e: e.detail["step"])]
        if cfg.deploy.deployment:
            with contextlib.suppress(ShipyardError):  # the gate records why there is none
                models.append(deployed_model(cfg.deploy.deployment))
        return list(dict.fromkeys(models))

    def _work(self, models: list[str]) -> bool:
        """Keep one eval worker on the first model with queued items; True while one runs."""
        if self.worker is not None:
            model, proc = self.worker
            code = proc.poll()
            if code is None:
                return True
            children.reap(proc)
            self.worker = None
            if code != 0:
                self.table.event(self.run_id, "eval-worker-exit", model=model, exit_code=code)
        for model in models:
            if queued(self.queue, model):
                argv = [sys.executable, "-m", "shipyard.evals.worker", model]
                proc = children.spawn(argv, env=_env(), stdout=self.log, stderr=self.log)
                self.worker = (model, proc)
                return True
        return False


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m shipyard.train.lifecycle RUN_ID", file=sys.stderr)
        return 2
    try:
        agent = Agent(args[0], sys.stdout.fileno())
        try:
            while not agent.step():
                time.sleep(POLL_S)
        finally:
            agent.close()
    except ShipyardError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
