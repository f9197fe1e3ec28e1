"""What a host killed in the middle of large pieces fetches again after its restart, with the
partial pieces it kept, side by side with the same run whose partial files are deleted first.

    .venv/bin/python benchmarks/resume_partial.py [--size-mib 256] [--piece-mib 32]
        [--seeders 2] [--rate-mbit 400] [--kill-at 0.5] [--runs 3]

Real daemons on loopback: `--seeders` peers hold the artifact, each uploading at `--rate-mbit`;
one host fetches it, and its daemon is SIGKILLed once `--kill-at` of the artifact's bytes are on
its disk (verified pieces and partial files), then started again with the same command line,
carrying on from its want record. The baseline run deletes the host's `.partial/` directory
before the restart: what a daemon that resumes only from verified pieces would have to fetch.

`value` is the bytes the restarted daemon fetched ÷ the bytes it lacked at the kill (verified
pieces and kept partial bytes counted as held): 1.0 is the floor, nothing fetched twice.
`baseline` is the same for the baseline run, `ratio` = baseline ÷ value. `resume_s` and
`baseline_resume_s` are the median seconds from the restart until the host held the artifact.
Runs alternate arm by arm; medians over `--runs`.
"""

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bytecode import compile_shipyard
from shipyard.store import LocalBackend, Manifest, PieceRef, PieceStore, put_tree

PEER_BYTES = 'shipyard_peer_bytes_received_total{source="peer"}'


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Daemon:
    def __init__(self, store: Path, seeds: list[str], extra: list[str], log: Path) -> None:
        self.address = f"127.0.0.1:{free_port()}"
        self.store = store
        self.cmd = [sys.executable, "-m", "shipyard.cli.main", "peer", "serve", "--listen",
                    self.address, "--store", str(store), "--no-fsync", "--seeds", ",".join(seeds),
                    *extra]  # fmt: skip
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> "Daemon":
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(self.port(), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.02)
        raise SystemExit(f"daemon {self.address} did not start: {self.log.read_text()[-2000:]}")

    def port(self) -> tuple[str, int]:
        host, port = self.address.rsplit(":", 1)
        return host, int(port)

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def metric(self, name: str) -> float:
        with urllib.request.urlopen(f"http://{self.address}/metrics", timeout=10) as reply:
            for line in reply.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.rsplit(" ", 1)[1])
        return 0.0


def pieces(manifest: Manifest) -> list[PieceRef]:
    return list({p.hash: p for f in manifest.files for p in f.pieces}.values())


def on_disk(store: Path, manifest: Manifest) -> tuple[int, int]:
    """Bytes of verified pieces, and bytes kept in partial files, in a host's store."""
    verified = kept = 0
    for ref in pieces(manifest):
        piece = store / "pieces" / ref.hash[:2] / ref.hash
        partial = store / ".partial" / ref.hash
        if piece.exists():
            verified += ref.size
        elif partial.exists():
            kept += partial.stat().st_size
    return verified, kept


def one_run(
    tmp: Path, manifest: Manifest, args: argparse.Namespace, keep: bool
) -> dict[str, float]:
    """Fetch, kill at the mark, restart; the bytes fetched after the restart and how long."""
    run = Path(tempfile.mkdtemp(dir=tmp))
    rate = ["--upload-limit-mbit", str(args.rate_mbit)]
    seeders: list[Daemon] = []
    for i in range(args.seeders):
        store = run / f"seed{i}"
        subprocess.run(["cp", "-r", str(tmp / "made"), str(store)], check=True)
        seeds = [s.address for s in seeders]
        seeders.append(Daemon(store, seeds, rate, run / f"seed{i}.log").start())
    host = Daemon(run / "host", [s.address for s in seeders], [], run / "host.log").start()
    time.sleep(1.5)  # gossip: the host knows every seeder before it starts
    cli = [sys.executable, "-m", "shipyard.cli.main", "pull", manifest.id, "--peer", host.address]
    puller = subprocess.Popen(cli, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while sum(on_disk(host.store, manifest)) < args.kill_at * manifest.size:
            time.sleep(0.01)
        puller.kill()
        host.kill()
        verified, kept = on_disk(host.store, manifest)
        if not keep:
            subprocess.run(["rm", "-rf", str(host.store / ".partial")], check=True)
        lacked = manifest.size - verified - kept
        restarted = time.monotonic()
        host.start()
        # The daemon's own count, not the piece files: it is what counts the bytes it fetched.
        held = f'shipyard_peer_artifact_pieces_held{{artifact="{manifest.id}"}}'
        while host.metric(held) < len(pieces(manifest)):
            time.sleep(0.02)
        resume_s = time.monotonic() - restarted
        fetched = host.metric(PEER_BYTES)
    finally:
        puller.kill()
        for daemon in [host, *seeders]:
            daemon.kill()
        subprocess.run(["rm", "-rf", str(run)], check=True)
    return {"ratio": fetched / lacked, "resume_s": resume_s, "kept": kept, "lacked": lacked}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--piece-mib", type=int, default=32)
    parser.add_argument("--seeders", type=int, default=2)
    parser.add_argument("--rate-mbit", type=float, default=400.0)
    parser.add_argument("--kill-at", type=float, default=0.5)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    compile_shipyard()
    with tempfile.TemporaryDirectory(prefix="resume-partial-") as name:
        tmp = Path(name)
        source = tmp / "src"
        source.mkdir()
        with open(source / "weights.bin", "wb") as out:
            for _ in range(args.size_mib):
                out.write(os.urandom(1 << 20))
        store = PieceStore(LocalBackend(tmp / "made", fsync=False))
        manifest = put_tree(store, source, "model", args.piece_mib << 20)
        kept_runs, dropped_runs = [], []
        for _ in range(args.runs):
            kept_runs.append(one_run(tmp, manifest, args, keep=True))
            dropped_runs.append(one_run(tmp, manifest, args, keep=False))
    value = statistics.median(r["ratio"] for r in kept_runs)
    baseline = statistics.median(r["ratio"] for r in dropped_runs)
    kept_mib = statistics.median(r["kept"] for r in kept_runs) / (1 << 20)
    print(
        f"fetched after the restart / lacked at the kill: {value:.3f} with partial pieces, "
        f"{baseline:.3f} without (median {kept_mib:.1f} MiB kept at the kill)"
    )
    print(
        json.dumps(
            {
                "name": "resume_partial",
                "value": round(value, 3),
                "unit": "x bytes lacked",
                "baseline": round(baseline, 3),
                "ratio": round(baseline / value, 3),
                "resume_s": round(statistics.median(r["resume_s"] for r in kept_runs), 2),
                "baseline_resume_s": round(
                    statistics.median(r["resume_s"] for r in dropped_runs), 2
                ),
                "kept_mib_at_kill": round(kept_mib, 1),
                "size_mib": args.size_mib,
                "piece_mib": args.piece_mib,
                "seeders": args.seeders,
                "rate_mbit": args.rate_mbit,
                "runs": args.runs,
                "values": [round(r["ratio"], 3) for r in kept_runs],
                "baseline_values": [round(r["ratio"], 3) for r in dropped_runs],
            }
        )
    )


if __name__ == "__main__":
    main()
