"""`shipyard.children`: what a process starts dies with it, SIGKILL included."""

import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.processes import alive as _alive

# Spawns `sh`, which starts a background grandchild in the spawned group; a forked child of
# the parent lives on (it must not keep the keeper waiting). Registers `argv[1]` for removal.
PARENT = r"""
import os, signal, subprocess, sys, time
from pathlib import Path
from shipyard import children
proc = children.spawn(["sh", "-c", "sleep 600 & echo $! ; wait"], stdout=subprocess.PIPE)
grandchild = proc.stdout.readline().decode().strip()
children.keep(proc.pid, signal.SIGKILL, remove=Path(sys.argv[1]))
if os.fork() == 0:
    time.sleep(20)  # alive while the keeper acts
    os._exit(0)
print(proc.pid, grandchild, flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("how", ["kill", "terminate"])
def test_children_and_their_group_die_with_the_parent(tmp_path: Path, how: str) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(scratch)], stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    pids = [int(p) for p in parent.stdout.readline().split()]
    assert len(pids) == 2 and all(_alive(p) for p in pids)
    getattr(parent, how)()
    parent.wait()
    deadline = time.monotonic() + 120
    while any(_alive(p) for p in pids) or scratch.exists():
        assert time.monotonic() < deadline, "the parent's children outlived it"
        time.sleep(0.05)
