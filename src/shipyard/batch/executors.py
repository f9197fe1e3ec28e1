"""Where workers run: local processes (kept at strength while work remains) or Ray tasks. Both
run the same `drain` loop on the same queue, so the shard protocol is one."""

import os
import subprocess
import sys
import time
from collections.abc import Callable

from shipyard import children
from shipyard.batch.job import Job
from shipyard.batch.progress import Progress, progress
from shipyard.errors import InvalidInput, StorageError
from shipyard.queue import open_queue

# One thread per worker: scale with workers, not threads inside one.
WORKER_ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_OFFLINE": "1",
}


def worker_command(job: Job, lease: float) -> list[str]:
    return [sys.executable, "-m", "shipyard.batch.worker", job.queue, "--lease", str(lease)]


def _finished(job: Job) -> bool:
    queue = open_queue()
    try:
        (stats,) = queue.stats(job.queue)
        return stats.ready + stats.waiting + stats.leased == 0
    finally:
        queue.close()


def run_local(
    job: Job,
    workers: int,
    lease: float = 60.0,
    report: Callable[[Progress], None] | None = None,
    every: float = 5.0,
    on_start: Callable[[subprocess.Popen[bytes]], None] | None = None,
) -> Progress:
    """Run `workers` worker processes until the job's queue is drained. A worker that dies
    while work remains is replaced: its shard comes back when its lease runs out. The workers
    die with this process, however it ends (`shipyard.children`)."""
    if workers < 1:
        raise InvalidInput(f"workers must be at least 1, not {workers}")
    env = {**os.environ, **WORKER_ENV}
    started = time.time()
    procs: list[subprocess.Popen[bytes]] = []
    last = 0.0
    queue = open_queue()
    try:
        while True:
            for ended in [p for p in procs if p.poll() is not None]:
                children.reap(ended)
                procs.remove(ended)
            done = _finished(job)
            if done and not procs:
                return progress(queue, job, started)
            while not done and len(procs) < workers:
                proc = children.spawn(
                    worker_command(job, lease), env=env, stdout=subprocess.DEVNULL
                )
                procs.append(proc)
                if on_start:
                    on_start(proc)
            if report and time.time() - last >= every:
                last = time.time()
                report(progress(queue, job, started))
            time.sleep(0.2)
    finally:
        for proc in procs:
            children.stop(proc)
        queue.close()


def run_ray(job: Job, workers: int, lease: float = 60.0, address: str | None = None) -> Progress:
    """The same workers as Ray tasks (one CPU each), on the cluster at `address` or a local one.
    A task that dies is retried by Ray; its shard comes back when its lease runs out."""
    try:
        import ray
    except ImportError:
        raise InvalidInput("the Ray executor needs ray: pip install 'shipyard[ray]'") from None
    from shipyard.home import shipyard_home

    started = time.time()
    env = {**WORKER_ENV, "SHIPYARD_HOME": str(shipyard_home())}
    for name in ("SHIPYARD_DB", "SHIPYARD_STORE"):
        if name in os.environ:
            env[name] = os.environ[name]
    owned = not ray.is_initialized()
    if owned:
        ray.init(
            address=address,
            num_cpus=None if address else workers,
            log_to_driver=False,
            runtime_env={"env_vars": env},
        )

    @ray.remote(num_cpus=1, max_retries=3)
    def drain_task(queue_name: str) -> int:
        from shipyard.batch.worker import drain

        return drain(queue_name, lease, say=lambda _: None)

    try:
        ray.get([drain_task.remote(job.queue) for _ in range(workers)])
    except Exception as exc:  # Ray wraps task failures in its own types
        raise StorageError(f"Ray workers of job {job.id[:16]} failed: {str(exc)[:300]}") from None
    finally:
        if owned:
            ray.shutdown()
    queue = open_queue()
    try:
        return progress(queue, job, started)
    finally:
        queue.close()
