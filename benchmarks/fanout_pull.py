"""`shipyard pull ID --dest DIR` on every emulated host of `fanout.py`, released at one moment.

Each host runs the real command, in its network namespace, against its own daemon. The runner
imports Shipyard, says it is ready, then blocks on a shared lock of a start gate until the
harness releases its exclusive one: every pull starts at the same moment, and the CLI's import
(some 0.2 s of CPU each: 16 at once would take seconds of the 2 shared cores, which hosts of
their own would not share) stays off the clock. Each runner prints when its command returned and
with what exit code; the files it wrote are then checked against the source's SHA-256.
"""

import fcntl
import hashlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fanout_rig import Rig

RUNNER = """
import fcntl, sys, time
import shipyard.cli.pull, shipyard.distribute.client  # imported before the clock starts
from shipyard.cli.main import main
with open(sys.argv[1]) as gate:
    print("pull ready", flush=True)
    fcntl.flock(gate, fcntl.LOCK_SH)
code = main(sys.argv[2:])
print(f"pull exited {code} at {time.time():.6f}", flush=True)
sys.exit(code)
"""
_EXITED = re.compile(r"pull exited (\d+) at ([0-9.]+)")


@dataclass
class Pull:
    ns: str
    dest: Path
    log: Path


class Pulls:
    """One round of pulls: spawned behind a closed gate, released together."""

    def __init__(self, rig: Rig, python: str, gate: Path) -> None:
        self.rig = rig
        self.python = python
        self.gate = gate
        self.lock = open(gate, "w")  # noqa: SIM115 (held until `release`)
        fcntl.flock(self.lock, fcntl.LOCK_EX)
        self.pulls: dict[str, Pull] = {}

    def spawn(self, name: str, ns: str, daemon: str, artifact: str, dest: Path, log: Path,
              wait_daemon: float) -> None:  # fmt: skip
        cmd = [self.python, "-c", RUNNER, str(self.gate), "pull", artifact, "--peer", daemon,
               "--dest", str(dest), "--json", "--wait-daemon", str(wait_daemon)]  # fmt: skip
        self.rig.spawn(ns, cmd, log)
        self.pulls[name] = Pull(ns, dest, log)

    def release(self, timeout: float = 60.0) -> float:
        """Once every runner is ready, open the gate; returns that moment (`time.time()`)."""
        deadline = time.monotonic() + timeout
        for name, pull in self.pulls.items():
            while "pull ready" not in pull.log.read_text():
                if time.monotonic() > deadline:
                    raise SystemExit(f"{name}'s pull did not start: {pull.log}")
                time.sleep(0.01)
        opened = time.time()
        fcntl.flock(self.lock, fcntl.LOCK_UN)
        self.lock.close()
        return opened

    def finished(self, name: str) -> float | None:
        """When the host's pull returned (wall clock), or None while it runs; a pull that
        failed ends the benchmark with its log."""
        found = _EXITED.search(self.pulls[name].log.read_text())
        if found is None:
            return None
        if found[1] != "0":
            log = self.pulls[name].log
            raise SystemExit(f"{name}'s pull exited {found[1]}:\n{log.read_text()[-2000:]}")
        return float(found[2])

    def wait(self, names: list[str], timeout: float, report: Callable[[], None]) -> float:
        """Until every named pull has returned: the latest return (wall clock)."""
        deadline = time.monotonic() + timeout
        last_report = time.monotonic()
        while True:
            done = [self.finished(name) for name in names]
            if all(t is not None for t in done):
                return max(t for t in done if t is not None)
            if time.monotonic() > deadline:
                raise SystemExit(f"pulls timed out: {sum(t is not None for t in done)} done")
            if time.monotonic() - last_report > 2:
                last_report = time.monotonic()
                report()
            time.sleep(0.05)

    def check(self, names: list[str], path: str, digest: str) -> None:
        """Every named host's file at `path` under its destination hashes to `digest`."""
        for name in names:
            target = self.pulls[name].dest / path
            with open(target, "rb") as f:
                if hashlib.file_digest(f, "sha256").hexdigest() != digest:
                    raise SystemExit(f"{name}: {target} does not match the source")
