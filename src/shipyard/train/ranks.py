"""Rank processes: warm spares, assignment, liveness and signals, for children and adopted pids.

A spare is a rank process started ahead of time, torch imported and warm, waiting for its
assignment, so a restart skips the interpreter and import cost: a fork of one warm server
(`forked`), or `python -m shipyard.train.worker` reading stdin (cold starts). A controller that re-
attaches after its own restart adopts the ranks by pid and start time (`procid`); it cannot read
their exit codes, so it relies on their `done` beats and on /proc.
"""

import dataclasses
import itertools
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from shipyard.train.forked import ForkedSpare
from shipyard.train.procid import ProcessId
from shipyard.train.worker import Assignment

_counter = itertools.count()
WARM_DIR = "SHIPYARD_TRAIN_WARM_DIR"  # where a spare says it is warm (see `worker.main`)


def warm_marker(directory: Path, pid: int) -> Path:
    return directory / f"warm-{pid}"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


Spare = subprocess.Popen[bytes] | ForkedSpare


def log_path(log_dir: Path) -> Path:
    log_dir.mkdir(parents=True, exist_ok=True)
    return log_dir / f"worker-{os.getpid()}-{next(_counter)}.log"


def spawn_worker(log_dir: Path) -> subprocess.Popen[bytes]:
    log = log_path(log_dir)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", WARM_DIR: str(log_dir)}
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "shipyard.train.worker"],
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # a Ctrl-C to the controller is the controller's to handle
        )


class RankProcess:
    """One rank: a child we started (exit code known) or an adopted process (liveness only).

    Either way it is named by pid and start time (`ProcessId`): a signal never reaches a process
    that got the pid after the rank exited.
    """

    def __init__(self, ident: ProcessId, proc: Spare | None = None) -> None:
        self.ident = ident
        self.proc = proc

    @property
    def pid(self) -> int:
        return self.ident.pid

    def exit_code(self) -> int | None:
        """None while alive; the exit code (or -1 if adopted and unknown) once gone."""
        if self.proc is not None:
            return self.proc.poll()
        return None if self.ident.alive() else -1

    def signal(self, sig: int) -> None:
        self.ident.signal(sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()


class SparePool:
    """`size` warm worker processes, refilled as they are taken.

    With `fork`, spares are forks of one warm server (`forked`): warm at once, so the pool can
    be refilled at each restart itself. Otherwise each is a new interpreter (`spawn_worker`).
    """

    def __init__(self, size: int, log_dir: Path, fork: bool = False) -> None:
        self.size, self.log_dir, self.fork = size, log_dir, fork
        self._ready: list[Spare] = []
        self.fill()

    def _spawn(self) -> Spare:
        if self.fork:
            return ForkedSpare(log_path(self.log_dir), self.log_dir)
        return spawn_worker(self.log_dir)

    def fill(self) -> None:
        self._ready = [p for p in self._ready if p.poll() is None]
        while len(self._ready) < self.size:
            self._ready.append(self._spawn())

    def warm(self) -> int:
        """How many spares are warm now (a launch beyond that waits for a warm-up)."""
        return sum(
            p.poll() is None and warm_marker(self.log_dir, p.pid).exists() for p in self._ready
        )

    def warming(self) -> bool:
        """Whether a spare is still paying its start-up: on a host whose cores the ranks share,
        it takes CPU from them meanwhile."""
        return any(
            p.poll() is None and not warm_marker(self.log_dir, p.pid).exists() for p in self._ready
        )

    def take(self) -> Spare:
        """A warm spare (else the oldest one, else a fresh worker process)."""
        self._ready = [p for p in self._ready if p.poll() is None]
        if not self._ready:
            return self._spawn()
        warm = [p for p in self._ready if warm_marker(self.log_dir, p.pid).exists()]
        chosen = (warm or self._ready)[0]
        self._ready.remove(chosen)
        return chosen

    def close(self) -> None:
        for proc in self._ready:  # a spare holds nothing yet: no need to wait for its warm-up
            proc.kill()
            proc.wait()
        self._ready = []


def assign(proc: Spare, job: Assignment) -> RankProcess:
    ident = ProcessId.of(proc.pid)  # read before the process can exit and be reaped
    if isinstance(proc, ForkedSpare):
        proc.assign(job.to_json())
    else:
        assert proc.stdin is not None
        proc.stdin.write((job.to_json() + "\n").encode())
        proc.stdin.flush()
        proc.stdin.close()
    return RankProcess(ident, proc)


def launch(pool: SparePool, job: Assignment) -> list[RankProcess]:
    """Every rank of `job`'s world (`job` is rank 0's assignment), warm spares first."""
    return [
        assign(pool.take(), dataclasses.replace(job, rank=rank)) for rank in range(job.world_size)
    ]
