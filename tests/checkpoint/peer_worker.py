"""A rank that saves one checkpoint, reports its peer address, then dies or waits to be released.

Rank `--lose` kills itself (SIGKILL) right after the save commits: the lost rank. The others keep
their memory until the file `--release` appears.
"""

import argparse
import json
import os
import signal
import time
from pathlib import Path

import torch.distributed as dist
from tests.checkpoint.conftest import trained_state

from shipyard.checkpoint import CheckpointManager


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--report", required=True)
    parser.add_argument("--release", required=True)
    parser.add_argument("--lose", type=int, required=True)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    manager = CheckpointManager(args.root)
    manager.save(4, trained_state(seed=4), blocking=True)
    if rank == 0:
        Path(args.report).write_text(json.dumps(manager.peer_addresses))
    if rank == args.lose:
        os.kill(os.getpid(), signal.SIGKILL)
    while not Path(args.release).exists():
        time.sleep(0.05)


if __name__ == "__main__":
    main()
