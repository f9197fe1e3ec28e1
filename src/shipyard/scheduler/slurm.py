"""Slurm backend: admitted gangs become `sbatch` jobs pinned to the nodes the policy chose.

The policy stays the authority: each job names its nodes (`--nodelist`) and GPUs per node
(`--gres=gpu:K`), so Slurm only runs what Shipyard placed. Stopping sends SIGTERM to the job
steps (`scancel --signal=TERM`); at the end of the grace period a plain `scancel` finishes it.
"""

import os
import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from shipyard.errors import StorageError
from shipyard.scheduler.model import Node, Running
from shipyard.secretfile import ensure_private_dir

_ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY"}


@dataclass
class _Submitted:
    slurm_id: str
    kill_at: float | None = None


@dataclass
class SlurmBackend:
    nodes: Sequence[Node]
    log_dir: Path
    conf: Path | None = None  # slurm.conf; default: what the Slurm tools find themselves
    partition: str | None = None
    _jobs: dict[str, _Submitted] = field(default_factory=dict)

    def __post_init__(self) -> None:
        try:  # Slurm writes job output here with the job's umask
            ensure_private_dir(self.log_dir)
        except OSError as exc:
            raise StorageError(f"job log directory {self.log_dir}: {exc.strerror}") from None

    def _run(self, *args: str, script: str | None = None) -> str:
        env = dict(os.environ)
        if self.conf is not None:
            env["SLURM_CONF"] = str(self.conf)
        try:
            done = subprocess.run(
                args, input=script, capture_output=True, text=True, env=env, timeout=60
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise StorageError(f"slurm: {args[0]} failed to run ({exc})") from None
        if done.returncode != 0:
            raise StorageError(f"slurm: {' '.join(args[:2])}: {done.stderr.strip()}")
        return done.stdout

    def launch(self, run: Running, command: list[str]) -> dict[str, list[int]]:
        names = [self.nodes[i].name for i in sorted(run.alloc)]
        counts = set(run.alloc.values())
        gpus = [f"--gres=gpu:{counts.pop()}"] if len(counts) == 1 else [f"--gpus={run.job.gpus}"]
        minutes = max(1, int(-(-run.job.time_limit // 60)))
        args = ["sbatch", "--parsable", f"--job-name=shipyard-{run.job.id}"]
        args += [f"--nodes={len(names)}", f"--nodelist={','.join(names)}", *gpus]
        args += ["--ntasks-per-node=1", f"--time={minutes}"]
        args += [f"--output={self.log_dir / run.job.id}.%j.log"]
        if self.partition:
            args.append(f"--partition={self.partition}")
        script = "#!/bin/sh\nexec srun " + shlex.join(command) + "\n"
        slurm_id = self._run(*args, script=script).strip().split(";")[0]
        self._jobs[run.job.id] = _Submitted(slurm_id)
        return {self.nodes[i].name: list(range(k)) for i, k in run.alloc.items()}

    def running(self, job_id: str) -> bool:
        return job_id in self._jobs

    def stop(self, job_id: str, grace: float, now: float) -> None:
        job = self._jobs.get(job_id)
        if job is None or job.kill_at is not None:
            return
        job.kill_at = now + grace
        self._run("scancel", "--signal=TERM", job.slurm_id)  # to the steps, not the shell

    def poll(self, now: float) -> list[tuple[str, int]]:
        ended = []
        for job_id, job in list(self._jobs.items()):
            if job.kill_at is not None and now >= job.kill_at:
                self._run("scancel", job.slurm_id)
            state, code = self._state(job.slurm_id)
            if state in _ENDED:
                del self._jobs[job_id]
                ended.append((job_id, code))
        return ended

    def _state(self, slurm_id: str) -> tuple[str, int]:
        fields = dict(
            item.split("=", 1)
            for item in self._run("scontrol", "show", "job", "-o", slurm_id).split()
            if "=" in item
        )
        state = fields.get("JobState", "UNKNOWN")
        exit_code, _, signal = fields.get("ExitCode", "0:0").partition(":")
        code = int(exit_code) or (128 + int(signal) if signal and int(signal) else 0)
        return state, code

    def shutdown(self) -> None:
        for job in self._jobs.values():
            self._run("scancel", job.slurm_id)
        self._jobs.clear()
