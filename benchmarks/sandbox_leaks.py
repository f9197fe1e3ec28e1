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

The last line is JSON: `value` = leaked processes + mounts + cgroups + records (baseline: 0).
"""

import argparse
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

from sandbox_start import ServiceProcess
from shipyard.errors import ShipyardError
from shipyard.sandbox import Host, Limits
from shipyard.sandbox.client import Client
from shipyard.sandbox.server import socket_path

LEASE_S = 2.0
LIMITS = Limits(memory_mib=128, pids=32, disk_mib=16)


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


def start_driver(path: Path, seed: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, __file__, "--driver", str(path), "--seed", str(seed)],
        stdout=subprocess.PIPE,
        text=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=2000, help="episodes in all")
    parser.add_argument("--drivers", type=int, default=4, help="driver processes at once")
    parser.add_argument("--kill-rate", type=float, default=0.02, help="driver kills per episode")
    parser.add_argument("--force", action="store_true", help="full size even on a busy host")
    parser.add_argument("--driver", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    args = parser.parse_args()
    if args.driver:
        drive(args.driver, args.seed)
        return
    episodes, note = args.episodes, ""
    load = os.getloadavg()[0]
    if load > 2.5 and not args.force:
        episodes = max(40, episodes // 4)
        note = f"host busy (load {load:.1f} > 2.5): reduced to {episodes} episodes"
        print(note, file=sys.stderr)
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="sandbox-leaks-") as tmp:
        home = Path(tmp) / "home"
        service = ServiceProcess(home, "--pool-min", "2", "--lease-s", str(LEASE_S))
        service.start()
        path = socket_path(home)
        selector = selectors.DefaultSelector()
        drivers: list[subprocess.Popen[str]] = []

        def add_driver() -> None:
            driver = start_driver(path, rng.randrange(1 << 30))
            assert driver.stdout is not None
            selector.register(driver.stdout, selectors.EVENT_READ, driver)
            drivers.append(driver)

        def kill_driver(driver: subprocess.Popen[str]) -> None:
            driver.send_signal(signal.SIGKILL)
            driver.wait()
            assert driver.stdout is not None
            selector.unregister(driver.stdout)
            driver.stdout.close()
            drivers.remove(driver)

        for _ in range(args.drivers):
            add_driver()
        done = killed_drivers = 0
        service_kills = [episodes // 3, 2 * episodes // 3]
        started = time.monotonic()
        while done < episodes:
            for key, _ in selector.select(1.0):
                line = key.fileobj.readline()  # type: ignore[union-attr]
                if not line:
                    continue
                done += 1
                if rng.random() < args.kill_rate:
                    kill_driver(rng.choice(drivers))
                    killed_drivers += 1
                    add_driver()
            if service_kills and done >= service_kills[0]:
                service_kills.pop(0)
                service.kill()
                print(f"{done} episodes: service SIGKILLed, restarting", file=sys.stderr)
                service.start()
        for driver in list(drivers):
            kill_driver(driver)
            killed_drivers += 1
        seconds = time.monotonic() - started
        with Client(path) as client:  # the reaper takes what the killed drivers left
            deadline = time.monotonic() + 10 * LEASE_S
            while client.status()["active"] and time.monotonic() < deadline:
                time.sleep(0.1)
            status = client.status()
        service.stop()
        host = Host(home)
        try:
            leaks = host.leaks()
        finally:
            host.close()
    counts = {
        "processes": len(leaks.processes),
        "mounts": len(leaks.mounts),
        "cgroups": len(leaks.cgroups),
        "records": len(leaks.records),
    }
    print(
        f"{done} episodes in {seconds:.0f} s; drivers SIGKILLed: {killed_drivers}; service "
        f"SIGKILLed: 2; reaped by the last run: {status['reaped']}; left: {counts}",
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
                "episodes": done,
                "drivers_killed": killed_drivers,
                "service_kills": 2,
                "reaped": status["reaped"],
                "load": round(load, 2),
                "reduced": bool(note),
            }
        )
    )


if __name__ == "__main__":
    main()
