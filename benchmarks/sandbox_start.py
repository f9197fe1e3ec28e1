"""Episode latency and throughput of `shipyard sandbox serve`, side by side with raw bubblewrap.

    .venv/bin/python benchmarks/sandbox_start.py [--episodes 200] [--concurrency 4]

An episode is what a driver waits for: create a sandbox → exec `python3 -c …` → read the result
→ close it. Shipyard runs it through the service (warm pool, cgroup caps, seccomp, leases and the
reaper all on); the baseline runs the same `python3 -c` under a bare `bwrap --unshare-all` with the
same image binds and no pool, no caps, no agent. Both run sequentially (p50/p95 latency) and at
full concurrency (episodes/s), alternating arms. Goal: p50 ≤ 40 ms and ≥ 60 episodes/s, within
1.5× of raw bwrap. The machine is shared: with a 1-minute load average over 2.5 the run is cut to
a quarter and says so (`--force` runs it whole).

The last line is JSON: `value` is Shipyard's sequential p50 in ms, `baseline` raw bwrap's,
`ratio` = value / baseline; the throughput figures ride along.
"""

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from shipyard import children
from shipyard.sandbox import Limits, Outcome
from shipyard.sandbox.client import Client
from shipyard.sandbox.image import host_mounts
from shipyard.sandbox.server import socket_path

CODE = "print(sum(range(1000)))"
EXPECTED = b"499500\n"
LIMITS = Limits(memory_mib=256, pids=64, cpus=1.0, disk_mib=64)


class ServiceProcess:
    """`shipyard sandbox serve` as a child process on `home` (the leak benchmark kills it), in a
    process group of its own, with its sandboxes, that dies with this process."""

    def __init__(self, home: Path, *options: str) -> None:
        self.home = home
        self.options = options
        self.log = home / "serve.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        path = socket_path(self.home)
        path.unlink(missing_ok=True)
        env = {**os.environ, "SHIPYARD_HOME": str(self.home)}
        command = [sys.executable, "-m", "shipyard", "sandbox", "serve", *self.options]
        self.home.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            self.process = children.spawn(
                command, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log
            )
        deadline = time.monotonic() + 60
        while not path.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise SystemExit(f"the service did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL the service and everything in its group (idempotent)."""
        if self.process is not None:
            children.reap(self.process)
            self.process = None  # its group's number may be reused: never signal it again

    def stop(self) -> None:
        """SIGTERM the service, let it shut down, then end whatever is left of its group."""
        if self.process and self.process.poll() is None:
            self.process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(120)
        self.kill()


def shipyard_episode(client: Client) -> float:
    started = time.perf_counter()
    box = client.create(limits=LIMITS)
    result = box.exec(["python3", "-c", CODE], timeout=30)
    box.close()
    elapsed = time.perf_counter() - started
    if result.outcome is not Outcome.OK or result.stdout != EXPECTED:
        raise SystemExit(f"episode failed: {result}")
    return elapsed


RAW = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session"]
RAW += [word for mount in host_mounts() for word in mount]
RAW += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/work", "--chdir", "/work"]


def raw_episode() -> float:
    started = time.perf_counter()
    run = subprocess.run([*RAW, "python3", "-c", CODE], capture_output=True)
    elapsed = time.perf_counter() - started
    if run.returncode != 0 or run.stdout != EXPECTED:
        raise SystemExit(f"raw bwrap failed: {run.stderr.decode()}")
    return elapsed


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def concurrent(episode: Callable[[], float], workers: int, total: int) -> float:
    """Episodes per second with `workers` drivers running `total` episodes between them."""
    left = [total]
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                if left[0] == 0:
                    return
                left[0] -= 1
            episode()

    threads = [threading.Thread(target=work) for _ in range(workers)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return total / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=200, help="episodes per arm and mode")
    parser.add_argument("--concurrency", type=int, default=4, help="drivers at once")
    parser.add_argument("--force", action="store_true", help="full size even on a busy host")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    episodes = args.episodes
    note = ""
    if load > 2.5 and not args.force:
        episodes = max(8, episodes // 4)
        note = f"host busy (load {load:.1f} > 2.5): reduced to {episodes} episodes per arm"
        print(note, file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="sandbox-start-") as tmp:
        home = Path(tmp) / "home"
        service = ServiceProcess(home, "--pool-min", str(args.concurrency + 2))
        service.start()
        try:
            clients = [Client(socket_path(home)) for _ in range(args.concurrency)]
            for _ in range(5):  # warm the pool's λ and W before timing
                shipyard_episode(clients[0])
                raw_episode()
            ours, theirs = [], []
            for _ in range(episodes):  # alternate, so drift in the host's load hits both
                ours.append(shipyard_episode(clients[0]))
                theirs.append(raw_episode())
            pool = iter(clients)
            local = threading.local()

            def ours_concurrent() -> float:
                if not hasattr(local, "client"):
                    local.client = next(pool)
                return shipyard_episode(local.client)

            ours_rate = concurrent(ours_concurrent, args.concurrency, episodes)
            theirs_rate = concurrent(raw_episode, args.concurrency, episodes)
            status = clients[0].status()
            for client in clients:
                client.close()
        finally:
            service.stop()
    p50, p95 = percentile(ours, 0.5) * 1000, percentile(ours, 0.95) * 1000
    raw50, raw95 = percentile(theirs, 0.5) * 1000, percentile(theirs, 0.95) * 1000
    print(f"sequential  shipyard p50 {p50:6.1f} ms  p95 {p95:6.1f} ms", file=sys.stderr)
    print(f"sequential  raw bwrap p50 {raw50:6.1f} ms  p95 {raw95:6.1f} ms", file=sys.stderr)
    print(
        f"concurrency {args.concurrency}: shipyard {ours_rate:.1f} episodes/s, "
        f"raw bwrap {theirs_rate:.1f} episodes/s",
        file=sys.stderr,
    )
    print(f"pool: {json.dumps(status['pools'])}", file=sys.stderr)
    print(
        json.dumps(
            {
                "name": "sandbox_start",
                "value": round(p50, 2),
                "unit": "ms p50 create→exec→close",
                "baseline": round(raw50, 2),
                "ratio": round(p50 / raw50, 3),
                "p95_ms": round(p95, 2),
                "baseline_p95_ms": round(raw95, 2),
                "episodes_per_s": round(ours_rate, 1),
                "baseline_episodes_per_s": round(theirs_rate, 1),
                "throughput_ratio": round(ours_rate / theirs_rate, 3),
                "episodes": episodes,
                "concurrency": args.concurrency,
                "load": round(load, 2),
                "reduced": bool(note),
                "median_s_check": round(statistics.median(ours), 4),
            }
        )
    )


if __name__ == "__main__":
    main()
