"""Lying peers for `fanout.py --liar MODE`: start them, and read back what the honest hosts made
of them (whom each blamed, how soon, and whether any partial file kept bytes).

A liar is `tests/distribute/liar.py`: a real daemon that claims every piece and answers piece
requests with "not found" (`notfound`), half a piece of garbage then a reset (`halfreset`), the
piece with a byte flipped (`flip`) or a byte a second (`slow`).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fanout_rig import Rig
from shipyard.store.local import PARTIAL_DIR

LIAR = Path(__file__).resolve().parent.parent / "tests" / "distribute" / "liar.py"
MODES = ("notfound", "halfreset", "flip", "slow")
LIARS = 4  # among the hosts
BLAME_WITHIN = 10.0  # seconds: the goal for every honest host to blame the liars
# An honest daemon starved of CPU at its worst (`--starve`): stopped this long, then run this long.
STOPPED_S, RUNNING_S = 2.0, 0.4


def start_liar(
    rig: Rig, ns: str, address: str, mode: str, store: Path, origin: Path, seeds: str, log: Path
) -> subprocess.Popen[bytes]:
    """A liar at `address` whose store holds the origin's manifests (and pieces, to flip)."""
    shutil.rmtree(store, ignore_errors=True)
    if mode == "flip":
        shutil.copytree(origin, store)
    else:
        shutil.copytree(origin / "manifests", store / "manifests")
    cmd = [sys.executable, str(LIAR), mode, "--listen", address, "--store", str(store),
           "--seeds", seeds]  # fmt: skip
    return rig.spawn(ns, cmd, log)


def status(ns: str, address: str) -> dict[str, object]:
    """A daemon's `peer status --json`, asked from inside its namespace."""
    out = subprocess.run(
        ["ip", "netns", "exec", ns, sys.executable, "-m", "shipyard.cli.main", "peer", "status",
         "--peer", address, "--json"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    reply: dict[str, object] = json.loads(out)
    return reply


def blame_report(
    honest: list[tuple[str, str]], liars: list[str], wall_started: float
) -> dict[str, object]:
    """Per honest host (namespace, address), when it blamed each of `liars` (seconds after the
    pulls started); whether every host blamed every liar, and the latest such moment; and how
    many honest peers were blamed by mistake."""
    counts, latest, by_host, mistaken = [], [], [], 0
    for ns, address in honest:
        blamed = status(ns, address).get("blamed")
        at = {
            str(b["peer"]): float(b["at"]) - wall_started
            for b in (blamed if isinstance(blamed, list) else [])
            if isinstance(b, dict)
        }
        counts.append(sum(liar in at for liar in liars))
        times = [at[liar] for liar in liars if liar in at]
        latest += times
        by_host.append(round(max(times), 2) if times else None)
        mistaken += len(set(at) - set(liars))
    everyone = all(count == len(liars) for count in counts)
    return {
        "every_host_blamed_every_liar": everyone,
        "blamed_all_within_s": round(max(latest), 2) if everyone else None,
        "blamed_all_within_s_by_host": by_host,  # in the order of `honest`
        "min_liars_blamed_by_a_host": min(counts),
        "honest_peers_blamed": mistaken,
    }


def partial_bytes(store: Path) -> int:
    """Bytes left in the store's partial files: 0 once every piece is verified and stored."""
    directory = store / PARTIAL_DIR
    return sum(p.stat().st_size for p in directory.iterdir()) if directory.is_dir() else 0


@contextmanager
def starved(procs: list[subprocess.Popen[bytes]]) -> Iterator[None]:
    """Stop and continue the daemons `procs` (each its own session) in bursts while the block
    runs, as a host starved of CPU is: honest, but silent for seconds at a time."""
    done = threading.Event()

    def signal_all(sig: signal.Signals) -> None:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, sig)

    def bursts() -> None:
        while not done.is_set():
            signal_all(signal.SIGSTOP)
            done.wait(STOPPED_S)
            signal_all(signal.SIGCONT)
            done.wait(RUNNING_S)

    thread = threading.Thread(target=bursts, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        signal_all(signal.SIGCONT)
