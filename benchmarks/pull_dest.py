"""How long `pull --dest` takes once the daemon holds the whole artifact: the daemon writes the
files from its store (see `shipyard.distribute.materialize`), against copying the same file
with `shutil.copyfile` (in the kernel too) in the same script: the floor for a copy.

    .venv/bin/python benchmarks/pull_dest.py [--size-mib 256] [--piece-mib 1] [--runs 3]
        [--verify] [--workdir DIR]

Stores and destinations go to /dev/shm unless --workdir says otherwise. The pull runs in this
process (`shipyard.distribute.pull`), so the CLI's start-up is not counted. Last line: one JSON
object: value = the median pull's seconds, baseline = the median copy's, ratio = value /
baseline, and the copy method the daemon used.
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from shipyard.children import spawn, stop
from shipyard.distribute import pull
from shipyard.store import LocalBackend, Manifest, PieceStore, put_tree


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--size-mib", type=int, default=256)
    p.add_argument("--piece-mib", type=float, default=1.0)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--verify", action="store_true", help="pull --verify: hash the written bytes")
    p.add_argument("--workdir", type=Path, help="default: /dev/shm")
    args = p.parse_args()
    parent = args.workdir or (Path("/dev/shm") if Path("/dev/shm").is_dir() else None)
    work = Path(tempfile.mkdtemp(prefix="shipyard-pull-dest-", dir=parent))
    daemon = None
    try:
        source = work / "src"
        _, manifest = random_model(source, work / "store", args.size_mib, args.piece_mib)
        daemon, port = start_daemon(work / "store")  # its start-up is not what is measured
        pulls, copies, method = [], [], None
        for run in range(args.runs):
            started = time.monotonic()
            result = pull(("127.0.0.1", port), manifest.id, work / f"out{run}", verify=args.verify)
            pulls.append(time.monotonic() - started)
            method = result.copy
            started = time.monotonic()
            shutil.copyfile(source / "model.bin", work / f"copy{run}")
            copies.append(time.monotonic() - started)
            shutil.rmtree(work / f"out{run}")
            os.unlink(work / f"copy{run}")
            print(f"run {run}: pull {pulls[-1]:.3f} s, copy {copies[-1]:.3f} s", file=sys.stderr)
    finally:
        if daemon:
            stop(daemon)
        shutil.rmtree(work, ignore_errors=True)
    value, baseline = statistics.median(pulls), statistics.median(copies)
    print(json.dumps({
        "name": "pull_dest", "value": round(value, 3), "unit": "s", "baseline": round(baseline, 3),
        "ratio": round(value / baseline, 2), "size_mib": args.size_mib, "verify": args.verify,
        "copy": method, "load_avg_1m": round(os.getloadavg()[0], 2),
    }))  # fmt: skip


def random_model(
    source: Path, store_dir: Path, size_mib: int, piece_mib: float
) -> tuple[PieceStore, Manifest]:
    """`source/model.bin` of random bytes, put as a model artifact into a store at `store_dir`."""
    source.mkdir()
    with open(source / "model.bin", "wb") as out:
        for _ in range(size_mib):
            out.write(os.urandom(1 << 20))
    store = PieceStore(LocalBackend(store_dir, fsync=False))
    return store, put_tree(store, source, "model", int(piece_mib * (1 << 20)))


def start_daemon(store: Path) -> tuple["subprocess.Popen[bytes]", int]:
    """A peer daemon over `store` on a free loopback port, listening; it dies with this script."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [sys.executable, "-m", "shipyard.cli.main", "peer", "serve", "--listen",
           f"127.0.0.1:{port}", "--store", str(store), "--no-fsync"]  # fmt: skip
    daemon = spawn(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_listening(port)
    return daemon, port


def wait_listening(port: int) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit("the daemon did not start") from None
            time.sleep(0.05)


if __name__ == "__main__":
    main()
