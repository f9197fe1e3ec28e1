"""Local backend: real processes on this machine against a declared cluster of fake GPUs.

Each node of a gang gets one process whose `CUDA_VISIBLE_DEVICES` lists that node's GPU ids
(`SHIPYARD_NODE_RANK` and `SHIPYARD_NNODES` tell it its place). Stopping a job sends SIGTERM to
its process groups and SIGKILL once its grace period is over. Jobs die with the service: a
restarted service requeues what was running, so a job left behind would run twice at once.
"""

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from shipyard.children import reap, spawn
from shipyard.errors import StorageError
from shipyard.scheduler.model import Node, Running
from shipyard.secretfile import ensure_private_dir


@dataclass
class _Gang:
    procs: list[subprocess.Popen[bytes]]
    gpus: dict[int, list[int]]
    kill_at: float | None = None


@dataclass
class LocalBackend:
    nodes: Sequence[Node]
    log_dir: Path
    _free: dict[int, list[int]] = field(default_factory=dict)
    _gangs: dict[str, _Gang] = field(default_factory=dict)

    def __post_init__(self) -> None:
        try:  # job output is the user's: no other account reads it
            ensure_private_dir(self.log_dir)
        except OSError as exc:
            raise StorageError(f"job log directory {self.log_dir}: {exc.strerror}") from None
        self._free = {i: list(range(n.gpus)) for i, n in enumerate(self.nodes)}

    def launch(self, run: Running, command: list[str]) -> dict[str, list[int]]:
        """Start one process per node of the gang; returns node name → GPU ids."""
        gpus = {i: [self._free[i].pop(0) for _ in range(count)] for i, count in run.alloc.items()}
        procs: list[subprocess.Popen[bytes]] = []
        try:
            self._start(run, command, gpus, procs)
        except OSError:
            for proc in procs:  # all or nothing: a gang never runs partly
                reap(proc)
            self._give_back(gpus)
            raise
        self._gangs[run.job.id] = _Gang(procs, gpus)
        return {self.nodes[i].name: ids for i, ids in gpus.items()}

    def _start(
        self,
        run: Running,
        command: list[str],
        gpus: dict[int, list[int]],
        procs: list["subprocess.Popen[bytes]"],
    ) -> None:
        for rank, (i, ids) in enumerate(sorted(gpus.items())):
            env = dict(os.environ)
            env.update(
                CUDA_VISIBLE_DEVICES=",".join(map(str, ids)),
                SHIPYARD_JOB_ID=run.job.id,
                SHIPYARD_NODE=self.nodes[i].name,
                SHIPYARD_NODE_RANK=str(rank),
                SHIPYARD_NNODES=str(len(gpus)),
            )
            path = self.log_dir / f"{run.job.id}.{rank}.log"
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
            with os.fdopen(os.open(path, flags, 0o600), "ab") as log:
                procs.append(spawn(command, env=env, stdout=log, stderr=log))

    def _give_back(self, gpus: dict[int, list[int]]) -> None:
        for i, ids in gpus.items():
            self._free[i] = sorted(self._free[i] + ids)

    def running(self, job_id: str) -> bool:
        return job_id in self._gangs

    def stop(self, job_id: str, grace: float, now: float) -> None:
        gang = self._gangs.get(job_id)
        if gang is None or gang.kill_at is not None:
            return
        gang.kill_at = now + grace
        for proc in gang.procs:
            _signal(proc, signal.SIGTERM)

    def poll(self, now: float) -> list[tuple[str, int]]:
        """Jobs whose processes have all exited, with the first non-zero exit code (or 0)."""
        ended = []
        for job_id, gang in list(self._gangs.items()):
            if gang.kill_at is not None and now >= gang.kill_at:
                for proc in gang.procs:
                    _signal(proc, signal.SIGKILL)
            codes = [proc.poll() for proc in gang.procs]
            if any(code is None for code in codes):
                continue
            for proc in gang.procs:  # what a job started does not outlive it
                reap(proc)
            self._give_back(gang.gpus)
            del self._gangs[job_id]
            ended.append((job_id, next((c for c in codes if c), 0) or 0))
        return ended

    def shutdown(self) -> None:
        for job_id in list(self._gangs):
            self.stop(job_id, 0.0, 0.0)
        for gang in self._gangs.values():
            for proc in gang.procs:
                reap(proc)


def _signal(proc: "subprocess.Popen[bytes]", sig: signal.Signals) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
