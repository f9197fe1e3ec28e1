"""What sandboxes leak when their drivers and the service die: processes, mounts, cgroups, records.

    .venv/bin/python benchmarks/sandbox_leaks.py [--episodes 2000] [--drivers 4] [--kill-rate 0.02]

Driver processes run episodes against `shipyard sandbox serve` (create → exec a command that
leaves a background process, sometimes one that times out → close). After each finished
episode, with probability `--kill-rate`, a random driver is SIGKILLed mid-flight (its open
sandbox is left to the reaper) and a new one takes its place; at a third and two thirds of the
episodes the service itself is SIGKILLed and restarted. At the end the remaining drivers are
killed too, the reaper is given the lease time to act, the service stops, and what is left on the
host is counted (`shipyard.sandbox.leaks`). Goal: 0. With a 1-minute load average over 2.5 the
run is cut to a quarter and says so (`--force` runs it whole).

However the run ends (an error, Ctrl-C, SIGTERM), it leaves nothing: drivers and the service run
in process groups of their own that die with this process (`shipyard.children`), and on the way
out their groups are SIGKILLed and what their sandboxes left (records, cgroups) is removed.
`--home DIR` runs the service there (default: a temporary directory).

The last line is JSON: `value` = leaked processes + mounts + cgroups + records (baseline: 0).
"""

import argparse
import contextlib
import json
import os
import random
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sandbox_start import ServiceProcess
from shipyard import children
from shipyard.errors import ShipyardError
from shipyard.sandbox import Host, Limits
from shipyard.sandbox.client import Client
from shipyard.sandbox.leaks import Leaks
from shipyard.sandbox.server import socket_path

LEASE_S = 2.0
LIMITS = Limits(memory_mib=128, pids=32, disk_mib=16)
STALL_S = 120.0  # no episode finished for this long: the run is broken, say so and stop
MAX_DEATHS = 20  # drivers that died on their own (not killed here) before the run gives up


def drive(path: Path, seed: int) -> None:
    """A driver: episodes for ever, one line on stdout per episode finished."""
    rng = random.Random(seed)
    client = None
    while True:
        try:
            client = client or Client(path, lease_s=LEASE_S)
            box = client.create(limits=LIMITS)
            if rng.random() < 0.1:
                box.exec(["sh", "-c", "while :; do :; done"], timeout=0.2)
            box.exec(["sh", "-c", "sleep 1000 & echo $$"], timeout=10)
            box.close()
            print("ok", flush=True)
        except ShipyardError:  # the service is down or restarting: try again shortly
            client = None
            time.sleep(0.2)


class Drivers:
    """Driver processes, each in a process group of its own that dies with this process, and
    the episodes they report."""

    def __init__(self, path: Path, rng: random.Random) -> None:
        self.path = path
        self.rng = rng
        self.selector = selectors.DefaultSelector()
        self.running: list[subprocess.Popen[bytes]] = []
        self.killed = 0
        self.died = 0

    def add(self) -> None:
        seed = str(self.rng.randrange(1 << 30))
        argv = [sys.executable, __file__, "--driver", str(self.path), "--seed", seed]
        driver = children.spawn(argv, stdout=subprocess.PIPE)
        assert driver.stdout is not None
        self.selector.register(driver.stdout.fileno(), selectors.EVENT_READ, driver)
        self.running.append(driver)

    def kill(self, driver: subprocess.Popen[bytes]) -> None:
        """SIGKILL a driver's group, maybe mid-episode: its sandbox is left to the reaper. Safe
        to call again on a driver whose kill was interrupted."""
        assert driver.stdout is not None
        if not driver.stdout.closed:
            with contextlib.suppress(KeyError):
                self.selector.unregister(driver.stdout.fileno())
        if driver.returncode is None:  # once waited for, its group's number may be reused
            children.reap(driver)
        driver.stdout.close()
        if driver in self.running:
            self.running.remove(driver)

    def finished(self, timeout: float) -> int:
        """Episodes finished within `timeout`. Every ready pipe is read here, before the caller
        acts on any (it may kill a driver whose pipe was in the same batch); a driver that died
        on its own is replaced."""
        finished = 0
        for key, _ in self.selector.select(timeout):
            data = os.read(key.fd, 1 << 16)  # whole lines: a driver writes one per flush
            if data:
                finished += data.count(b"\n")
                continue
            self.died += 1
            if self.died > MAX_DEATHS:
                raise SystemExit(f"{self.died} drivers died on their own: see their stderr above")
            self.kill(key.data)
            self.add()
        return finished

    def close(self) -> None:
        for driver in list(self.running):
            self.kill(driver)
        self.selector.close()


def run(
    home: Path, service: ServiceProcess, episodes: int, args: argparse.Namespace
) -> dict[str, Any]:
    """The measured run: episodes under driver and service kills, then what is left."""
    rng = random.Random(args.seed)
    path = socket_path(home)
    drivers = Drivers(path, rng)
    try:
        service.start()
        for _ in range(args.drivers):
            drivers.add()
        done = 0
        service_kills = [episodes // 3, 2 * episodes // 3]
        started = last = time.monotonic()
        while done < episodes:
            for _ in range(drivers.finished(1.0)):
                done += 1
                last = time.monotonic()
                if rng.random() < args.kill_rate:
                    drivers.kill(rng.choice(drivers.running))
                    drivers.killed += 1
                    drivers.add()
            if time.monotonic() - last > STALL_S:
                raise SystemExit(f"no episode finished in {STALL_S:.0f} s (see {service.log})")
            if service_kills and done >= service_kills[0]:
                service_kills.pop(0)
                service.kill()
                print(f"{done} episodes: service SIGKILLed, restarting", file=sys.stderr)
                service.start()
        drivers.killed += len(drivers.running)
        drivers.close()
        seconds = time.monotonic() - started
    finally:
        drivers.close()
    with Client(path) as client:  # the reaper takes what the killed drivers left
        deadline = time.monotonic() + 10 * LEASE_S
        while client.status()["active"] and time.monotonic() < deadline:
            time.sleep(0.1)
        status = client.status()
    service.stop()
    leaks = count_leaks(home)
    return {
        "seconds": seconds,
        "episodes": done,
        "drivers_killed": drivers.killed,
        "drivers_died": drivers.died,
        "reaped": status["reaped"],
        "leaks": leaks,
    }


def count_leaks(home: Path) -> Leaks:
    host = Host(home)
    try:
        return host.leaks()
    finally:
        host.close()


def clean(home: Path) -> None:
    """Remove whatever sandboxes of `home` left (records, cgroups), as the next service would."""
    host = Host(home)
    try:
        host.reap_orphans()
    finally:
        host.close()


def _terminated(number: int, frame: object) -> None:
    """SIGTERM ends the run as Ctrl-C does, through the cleanup, which a second one does not
    interrupt."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.exit(128 + number)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=2000, help="episodes in all")
    parser.add_argument("--drivers", type=int, default=4, help="driver processes at once")
    parser.add_argument("--kill-rate", type=float, default=0.02, help="driver kills per episode")
    parser.add_argument("--force", action="store_true", help="full size even on a busy host")
    parser.add_argument("--home", type=Path, help="the service's home (default: a temporary one)")
    parser.add_argument("--driver", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    args = parser.parse_args()
    if args.driver:
        drive(args.driver, args.seed)
        return
    signal.signal(signal.SIGTERM, _terminated)
    episodes, note = args.episodes, ""
    load = os.getloadavg()[0]
    if load > 2.5 and not args.force:
        episodes = max(40, episodes // 4)
        note = f"host busy (load {load:.1f} > 2.5): reduced to {episodes} episodes"
        print(note, file=sys.stderr)
    with contextlib.ExitStack() as stack:
        home = args.home or Path(stack.enter_context(tempfile.TemporaryDirectory())) / "home"
        service = ServiceProcess(home, "--pool-min", "2", "--lease-s", str(LEASE_S))
        try:
            report = run(home, service, episodes, args)
        finally:  # whatever happened, nothing of this run stays behind
            service.kill()
            clean(home)
    leaks: Leaks = report.pop("leaks")
    counts = {
        "processes": len(leaks.processes),
        "mounts": len(leaks.mounts),
        "cgroups": len(leaks.cgroups),
        "records": len(leaks.records),
    }
    print(
        f"{report['episodes']} episodes in {report.pop('seconds'):.0f} s; drivers SIGKILLed: "
        f"{report['drivers_killed']}; service SIGKILLed: 2; reaped by the last run: "
        f"{report['reaped']}; left: {counts}",
        file=sys.stderr,
    )
    print(
        json.dumps(
            {
                "name": "sandbox_leaks",
                "value": leaks.total,
                "unit": "leaked processes + mounts + cgroups + records",
                "baseline": 0,
                **counts,
                **report,
                "service_kills": 2,
                "load": round(load, 2),
                "reduced": bool(note),
            }
        )
    )


if __name__ == "__main__":
    main()
