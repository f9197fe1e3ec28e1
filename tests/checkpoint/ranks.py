"""Launch N gloo rank processes of a script on loopback, as torchrun would.

Ranks die with the test process (parent-death signal). Deadlines are generous: a shared CI host
at load 20-40 takes minutes where an idle one takes seconds; only a hang should hit them.
"""

import functools
import os
import socket
import subprocess
import sys
from pathlib import Path

from shipyard.children import die_with_parent

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def launch(script: str, world: int, args: list[str]) -> list[subprocess.Popen[bytes]]:
    port = str(free_port())
    procs = []
    for rank in range(world):
        env = {
            **os.environ,
            "RANK": str(rank),
            "WORLD_SIZE": str(world),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
            "OMP_NUM_THREADS": "1",
            # Rank scripts import test helpers as `tests.…`, as pytest does.
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, str(HERE / script), *args],
                env=env,
                preexec_fn=functools.partial(die_with_parent, os.getpid()),
            )
        )
    return procs


RANKS_TIMEOUT_S = 1500.0  # per run of all ranks; tests that run several raise pytest's timeout


def run(script: str, world: int, args: list[str], timeout: float = RANKS_TIMEOUT_S) -> list[int]:
    """Run all ranks to the end; returns their exit codes."""
    procs = launch(script, world, args)
    try:
        return [p.wait(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
