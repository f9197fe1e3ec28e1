"""Crash safety: SIGKILL a process that saves checkpoints back to back, at random moments.

After each kill, `latest_committed()` must return a checkpoint whose shards all match their
SHA-256 and whose contents are those of its step (`torn` counts the ones that do not), and that
is no older than the last save the process saw commit (`lost` counts those). The next process
resumes on the same directory, saving over whatever the killed one left behind.

    .venv/bin/python benchmarks/checkpoint_crash.py [--kills 200] [--mb 16]
"""

import argparse
import hashlib
import json
import os
import random
import signal
import tempfile
import time
from pathlib import Path

import safetensors.numpy
import torch

from shipyard.checkpoint import CheckpointManager, Retention, latest_committed


def saver(root: Path, numel: int, report: int) -> None:
    """Child: save steps latest+1, latest+2, ... forever, reporting each commit on `report`."""
    found = latest_committed(root)
    step = found.step + 1 if found else 0
    manager = CheckpointManager(root, peer_memory=False, retention=Retention(keep_last=2))
    previous = None
    while True:
        state = {"w": torch.full((numel,), float(step)), "b": torch.arange(step, step + 1000)}
        handle = manager.save(step, state, loader={"step": step})
        if previous is not None:
            os.write(report, f"{previous}\n".encode())
        handle.result()
        previous = step
        step += 1


def check(root: Path, seen: int | None) -> tuple[bool, bool]:
    """(torn, lost) for the checkpoint `latest_committed` returns now.

    Checked with hashlib and numpy only: this process forks the savers, and torch work here
    (its thread pools) would not survive the fork.
    """
    found = latest_committed(root)
    if found is None:
        return False, seen is not None
    step = found.step
    for shard in found.manifest.shards:
        data = (found.path / shard.file).read_bytes()
        if hashlib.sha256(data).hexdigest() != shard.digest.sha256:
            return True, False
        arrays = safetensors.numpy.load(data)
        if not (arrays["w@0"] == step).all() or arrays["b@0"][0] != step:
            return True, False
    return False, seen is not None and step < seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=200)
    parser.add_argument("--mb", type=int, default=16, help="state size per checkpoint")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    numel = args.mb * (1 << 20) // 4
    torn = lost = commits = 0
    seen: int | None = None
    with tempfile.TemporaryDirectory(dir=os.environ.get("SHIPYARD_BENCH_DIR")) as tmp:
        root = Path(tmp) / "ckpt"
        for kill in range(args.kills):
            read_end, write_end = os.pipe()
            pid = os.fork()
            if pid == 0:  # the saving process
                os.close(read_end)
                try:
                    saver(root, numel, write_end)
                finally:
                    os._exit(1)
            os.close(write_end)
            time.sleep(rng.uniform(0.05, 1.0))
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            with os.fdopen(read_end) as reports:
                steps = [int(line) for line in reports.read().split()]
            seen = max([seen or 0, *steps]) if steps or seen is not None else None
            was_torn, was_lost = check(root, seen)
            commits += seen is not None
            torn += was_torn
            lost += was_lost
            if (kill + 1) % 20 == 0:
                print(f"{kill + 1} kills: {torn} torn, {lost} lost, last seen step {seen}")
    print(
        json.dumps(
            {
                "name": "checkpoint_crash",
                "value": torn,
                "unit": "torn checkpoints",
                "kills": args.kills,
                "torn": torn,
                "lost": lost,
                "kills_after_a_commit": commits,
                "last_step": seen,
            }
        )
    )


if __name__ == "__main__":
    main()
