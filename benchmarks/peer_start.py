"""How long `shipyard peer serve` takes from exec to listening, side by side with the floor.

    .venv/bin/python benchmarks/peer_start.py [--runs 7]

A restarted host idles its link until its daemon listens again, so start-up time is part of
every restart (`fanout.py --chaos` reports the same time under load in its `events`). `value` is
the median seconds from starting `shipyard peer serve` (empty store, no seeds) to its `listening`
line; `baseline` the same for a bare Python process that imports asyncio and listens on a TCP
port, the interpreter's own floor; `ratio` = value / baseline. The two alternate, run by run.
`cpu_s` and `baseline_cpu_s` are the median CPU seconds (user and system) each process used by
then: on a busy host, where a restarted daemon gets a small share of the cores, that is what
sets its start-up time.
"""

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bytecode import compile_shipyard
from proc_cpu import cpu_seconds

BARE = """
import asyncio, sys
async def main():
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", int(sys.argv[1]))
    print("listening", file=sys.stderr, flush=True)
    await server.serve_forever()
asyncio.run(main())
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def time_to_listening(cmd: list[str]) -> tuple[float, float]:
    """Seconds from starting `cmd` to the first stderr line that says it is listening, and the
    CPU seconds it had used by then."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "listening" in line:
                wall = time.perf_counter() - started
                return wall, sum(cpu_seconds(f"/proc/{proc.pid}/stat"))
        raise SystemExit(f"{cmd[:4]} exited ({proc.wait()}) without listening")
    finally:
        proc.kill()
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    compile_shipyard()
    shipyard, bare = [], []
    with tempfile.TemporaryDirectory(prefix="peer-start-") as tmp:
        for run in range(args.runs):
            store = Path(tmp) / f"store{run}"
            serve = [sys.executable, "-m", "shipyard.cli.main", "peer", "serve", "--listen",
                     f"127.0.0.1:{free_port()}", "--store", str(store), "--no-fsync"]  # fmt: skip
            shipyard.append(time_to_listening(serve))
            bare.append(time_to_listening([sys.executable, "-c", BARE, str(free_port())]))
    value, baseline = (statistics.median(wall for wall, _ in runs) for runs in (shipyard, bare))
    cpu, baseline_cpu = (statistics.median(cpu for _, cpu in runs) for runs in (shipyard, bare))
    print(
        f"shipyard peer serve: {value:.3f} s ({cpu:.2f} s CPU); "
        f"bare asyncio listener: {baseline:.3f} s ({baseline_cpu:.2f} s CPU)"
    )
    print(
        json.dumps(
            {
                "name": "peer_start",
                "value": round(value, 3),
                "unit": "s",
                "baseline": round(baseline, 3),
                "ratio": round(value / baseline, 2),
                "cpu_s": round(cpu, 3),
                "baseline_cpu_s": round(baseline_cpu, 3),
                "runs": args.runs,
                "values": [round(wall, 3) for wall, _ in shipyard],
                "baseline_values": [round(wall, 3) for wall, _ in bare],
            }
        )
    )


if __name__ == "__main__":
    main()
