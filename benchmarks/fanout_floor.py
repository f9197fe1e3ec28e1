"""What the `fanout.py` rig itself allows, with no swarm logic: every host both serves and
fetches over the same namespaces, veth links and `tc tbf` caps (needs root).

- `--mode bulk`: host i fetches S/K bytes from each of hosts i+1 .. i+K at once (K flows each
  way per host, all links loaded); the value is the time until the last flow ends ÷ (S/B), the
  same measure as `fanout.py`'s. Packet headers alone put the floor at about 1.05.
- `--mode pieces`: each host runs K loops that each fetch 1 MiB pieces, one request at a time
  over kept-alive connections, from random other hosts, for `--seconds`: the request/response
  pattern of a piece swarm with everything available everywhere. The value is the mean payload
  rate per host ÷ link rate (at most about 0.95 with headers).
- `--mode pairs`: the same, but loop k of host i always asks host i+1+k, so every host serves
  exactly as many loops as it runs (the pattern of `shipyard.distribute`'s mesh).

    sudo .venv/bin/python benchmarks/fanout_floor.py [--mode bulk|pieces|pairs] [--flows 4]

Last line: one JSON object.
"""

import argparse
import json
import os
import random
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

from fanout_rig import Rig

PORT = 9000
REQUEST = 16  # bytes: the size wanted, then the offset, both big-endian


def serve(ip: str, path: Path) -> None:
    """Answer each request on a connection with `size` bytes of `path` from `offset`."""
    listener = socket.create_server((ip, PORT), backlog=512)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_answer, args=(conn, path), daemon=True).start()


def _answer(conn: socket.socket, path: Path) -> None:
    with conn, open(path, "rb") as data:
        while len(ask := conn.recv(REQUEST, socket.MSG_WAITALL)) == REQUEST:
            size, offset = int.from_bytes(ask[:8], "big"), int.from_bytes(ask[8:], "big")
            sent = 0
            while sent < size:
                sent += os.sendfile(conn.fileno(), data.fileno(), offset + sent, size - sent)


def fetch(conn: socket.socket, size: int, offset: int, buffer: memoryview) -> int:
    conn.sendall(size.to_bytes(8, "big") + offset.to_bytes(8, "big"))
    got = 0
    while got < size:
        count = conn.recv_into(buffer[: min(size - got, len(buffer))], 0, socket.MSG_WAITALL)
        if count == 0:
            raise EOFError("server closed the connection")
        got += count
    return got


def agent(args: list[str]) -> None:
    """One host: serve, wait for the start time, fetch; print the bytes received and when the
    last bulk flow ended."""
    mode, me, peers, flows, size, seconds, path, start = args
    ring = peers.split(",")
    others = [p for p in ring if p != me]
    threading.Thread(target=serve, args=(me, Path(path)), daemon=True).start()
    flows_n, size_n, stop = int(flows), int(size), float(start) + float(seconds)
    received, finished = [0] * flows_n, [0.0] * flows_n

    def loop(k: int) -> None:
        buffer = memoryview(bytearray(1 << 20))
        time.sleep(max(0.0, float(start) - time.time()))
        if mode == "bulk":  # one long transfer from the (k+1)-th next host
            peer = ring[(ring.index(me) + 1 + k) % len(ring)]
            with socket.create_connection((peer, PORT)) as conn:
                received[k] = fetch(conn, size_n // flows_n, 0, buffer)
            finished[k] = time.time()
            return
        conns: dict[str, socket.socket] = {}
        mine = ring[(ring.index(me) + 1 + k) % len(ring)]
        while time.time() < stop:
            peer = random.choice(others) if mode == "pieces" else mine
            conn = conns.get(peer) or conns.setdefault(peer, socket.create_connection((peer, PORT)))
            received[k] += fetch(conn, 1 << 20, 0, buffer)

    threads = [threading.Thread(target=loop, args=(k,)) for k in range(flows_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(json.dumps({"bytes": sum(received), "last": max(finished)}), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--mode", choices=("bulk", "pieces", "pairs"), default="bulk")
    p.add_argument("--hosts", type=int, default=16)
    p.add_argument("--flows", type=int, default=4, help="transfers (bulk) or loops (others)")
    p.add_argument("--rate-mbit", type=float, default=100.0)
    p.add_argument("--size-mib", type=int, default=128, help="bytes each host fetches (bulk)")
    p.add_argument("--seconds", type=float, default=15.0, help="how long to fetch (not bulk)")
    args = p.parse_args()
    if os.geteuid() != 0:
        p.error("needs root (network namespaces and tc)")
    if not 1 <= args.flows < args.hosts:
        p.error("--flows must be at least 1 and below --hosts (each flow needs another host)")
    work = Path(tempfile.mkdtemp(prefix="shipyard-floor-", dir="/dev/shm"))
    rig = Rig(f"{os.getpid() % 100000}")
    try:
        data = work / "data.bin"
        data.write_bytes(os.urandom(max(args.size_mib << 20, 1 << 20)))
        hosts = [rig.host(f"h{i}", i + 1, args.rate_mbit) for i in range(args.hosts)]
        peers = ",".join(ip for _, ip in hosts)
        start = time.time() + 3 + args.hosts * 0.1  # every agent listening by then
        cmd = [args.mode, peers, str(args.flows), str(args.size_mib << 20), str(args.seconds),
               str(data), str(start)]  # fmt: skip
        logs = [work / f"h{i}.log" for i in range(args.hosts)]
        procs = [
            rig.spawn(ns, [sys.executable, __file__, "agent", cmd[0], ip, *cmd[1:]], log)
            for (ns, ip), log in zip(hosts, logs, strict=True)
        ]
        if any(proc.wait() != 0 for proc in procs):
            raise SystemExit(f"an agent failed:\n{logs[0].read_text()[-2000:]}")
        outs = [json.loads(log.read_text().strip().splitlines()[-1]) for log in logs]
    finally:
        rig.close()
        shutil.rmtree(work, ignore_errors=True)
    link = args.rate_mbit * 1e6 / 8
    if args.mode == "bulk":
        bound = (args.size_mib << 20) / link
        value = (max(o["last"] for o in outs) - start) / bound
    else:
        rates = [o["bytes"] / args.seconds / link for o in outs]
        value = sum(rates) / len(rates)
    unit = "x S/B" if args.mode == "bulk" else "share of link rate"
    result = {"name": f"fanout_floor_{args.mode}", "value": round(value, 3), "unit": unit,
              "hosts": args.hosts, "flows": args.flows, "rate_mbit": args.rate_mbit}  # fmt: skip
    print(json.dumps(result))


if __name__ == "__main__":
    if sys.argv[1:2] == ["agent"]:
        agent(sys.argv[2:])
    else:
        main()
