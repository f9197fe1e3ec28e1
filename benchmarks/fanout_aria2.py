"""The BitTorrent baseline for `fanout.py`: aria2 on every emulated host, a tracker beside the
origin, and the origin seeding the artifact's file, at the same link caps as Shipyard's swarm.

A .torrent is written here (bencoded, SHA-1 piece hashes, the artifact's piece size) and the
tracker is a small HTTP announce server run from this file (`python fanout_aria2.py tracker IP
PORT`: compact peer lists, 5 s announce interval), so nothing beyond Debian's `aria2` is needed.
Each host's aria2c keeps seeding once it has the file, as a BitTorrent swarm does; its
completion hook writes the time, and the run ends when every host has written one.
"""

import hashlib
import http.server
import shutil
import socket
import struct
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from fanout_rig import Rig

TRACKER_PORT = 6969
ANNOUNCE_INTERVAL = 5  # seconds between a peer's announces
# Written by aria2c's completion hook (arguments: GID, file count, file path).
HOOK = '#!/bin/sh\ndate +%s.%N > "$3.done"\n'


def available() -> bool:
    return shutil.which("aria2c") is not None


Bencodable = int | bytes | str | dict[str, "Bencodable"]


def bencode(value: Bencodable) -> bytes:
    if isinstance(value, int):
        return b"i%de" % value
    if isinstance(value, str):
        value = value.encode()
    if isinstance(value, bytes):
        return b"%d:%s" % (len(value), value)
    items = sorted(value.items())
    return b"d" + b"".join(bencode(k) + bencode(v) for k, v in items) + b"e"


def write_torrent(data: Path, piece_size: int, announce: str, out: Path) -> None:
    hashes = []
    with open(data, "rb") as f:
        while chunk := f.read(piece_size):
            hashes.append(hashlib.sha1(chunk).digest())
    info: dict[str, Bencodable] = {
        "name": data.name,
        "length": data.stat().st_size,
        "piece length": piece_size,
        "pieces": b"".join(hashes),
    }
    out.write_bytes(bencode({"announce": announce, "info": info}))


class _Announce(http.server.BaseHTTPRequestHandler):
    """A BitTorrent tracker's announce: remember the peer, answer with every other one."""

    swarms: ClassVar[dict[bytes, set[tuple[str, int]]]] = {}

    def do_GET(self) -> None:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query, encoding="latin-1")
        swarm = self.swarms.setdefault(query["info_hash"][0].encode("latin-1"), set())
        me = (self.client_address[0], int(query["port"][0]))
        if query.get("event") == ["stopped"]:
            swarm.discard(me)
        elif me not in swarm:
            swarm.add(me)
            print(f"joined {me[0]}:{me[1]}", flush=True)  # the benchmark waits for this line
        others = [peer for peer in swarm if peer != me]
        compact = b"".join(socket.inet_aton(ip) + struct.pack(">H", port) for ip, port in others)
        interval = {"interval": ANNOUNCE_INTERVAL, "min interval": 2}
        body = bencode({**interval, "peers": compact})
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        """Quiet: one line per announce would only fill the log."""


def serve_tracker(ip: str, port: int) -> None:
    http.server.ThreadingHTTPServer((ip, port), _Announce).serve_forever()


def aria2c(directory: Path, torrent: Path, hook: Path | None, *extra: str) -> list[str]:
    cmd = [
        "aria2c", f"--dir={directory}", "--seed-ratio=0.0", "--enable-dht=false",
        "--enable-dht6=false", "--bt-enable-lpd=false", "--file-allocation=none",
        "--summary-interval=0", "--console-log-level=warn", "--listen-port=6881",
        *extra, str(torrent),
    ]  # fmt: skip
    if hook is not None:
        cmd.insert(1, f"--on-bt-download-complete={hook}")
    return cmd


def tx_bytes(ns: str) -> int:
    """Bytes the namespace's link has sent (on the wire: packet headers included)."""
    out = subprocess.run(
        ["ip", "netns", "exec", ns, "cat", "/sys/class/net/eth0/statistics/tx_bytes"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return int(out)


def aria2_swarm(
    rig: Rig,
    origin: tuple[str, str],
    hosts: list[tuple[str, str]],
    data: Path,
    piece_size: int,
    work: Path,
    timeout: float,
) -> tuple[float, float]:
    """Seconds until every host holds the file, and the bytes the origin sent ÷ its size."""
    origin_ns, origin_ip = origin
    root = work / "aria2"
    seed_dir = root / "origin"
    seed_dir.mkdir(parents=True)
    (seed_dir / data.name).hardlink_to(data)
    torrent = root / "artifact.torrent"
    write_torrent(data, piece_size, f"http://{origin_ip}:{TRACKER_PORT}/announce", torrent)
    hook = root / "done.sh"
    hook.write_text(HOOK)
    hook.chmod(0o755)
    tracker = [sys.executable, __file__, "tracker", origin_ip, str(TRACKER_PORT)]
    rig.spawn(origin_ns, tracker, root / "tracker.log")
    _wait_listening(origin_ns, TRACKER_PORT, timeout)
    # The origin's file is the artifact itself: it seeds it without re-hashing it first. A
    # first announce that fails is retried only minutes later, so the hosts start once the
    # tracker knows the seeder.
    seed = aria2c(seed_dir, torrent, None, "--bt-seed-unverified=true")
    rig.spawn(origin_ns, seed, root / "origin.log")
    _wait_for(lambda: f"joined {origin_ip}:" in (root / "tracker.log").read_text(), timeout,
              "the origin's aria2c never announced itself to the tracker")  # fmt: skip
    sent_before = tx_bytes(origin_ns)
    started = time.time()  # wall clock: the completion hook writes `date +%s.%N`
    done_files = []
    for index, (ns, _) in enumerate(hosts):
        directory = root / f"h{index}"
        directory.mkdir()
        done_files.append(directory / f"{data.name}.done")
        rig.spawn(ns, aria2c(directory, torrent, hook), root / f"h{index}.log")
    while not all(f.exists() for f in done_files):
        if time.time() - started > timeout:
            have = sum(f.exists() for f in done_files)
            raise SystemExit(f"aria2 baseline timed out: {have} of {len(hosts)} hosts done")
        time.sleep(0.2)
    elapsed = max(float(f.read_text()) for f in done_files) - started
    return elapsed, (tx_bytes(origin_ns) - sent_before) / data.stat().st_size


def _wait_listening(ns: str, port: int, timeout: float) -> None:
    def listening() -> bool:
        ss = ["ip", "netns", "exec", ns, "ss", "-ltnH"]
        return f":{port} " in subprocess.run(ss, capture_output=True, text=True).stdout

    _wait_for(listening, timeout, f"nothing listens on port {port} in {ns}")


def _wait_for(ready: Callable[[], bool], timeout: float, failure: str) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise SystemExit(failure)
        time.sleep(0.1)


if __name__ == "__main__" and sys.argv[1:2] == ["tracker"]:
    serve_tracker(sys.argv[2], int(sys.argv[3]))
