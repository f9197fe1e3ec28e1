"""Real peer daemons as separate processes on loopback, and artifacts to distribute."""

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from shipyard.store import LocalBackend, Manifest, PieceStore, put_tree

PIECE = 256 << 10


class BytesSink:
    """A piece sink that only collects what arrives, for tests of the data plane alone."""

    def __init__(self, kept: bytes = b"") -> None:
        self.data = bytearray(kept)
        self.kept = len(kept)
        self.received = 0

    def write(self, data: memoryview) -> None:
        self.data += data
        self.received += len(data)

    def restart(self) -> None:
        self.data.clear()
        self.kept = self.received = 0

    def commit(self) -> None:
        """Nothing to store."""

    def close(self) -> None:
        """Nothing to release."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Peer:
    """One `shipyard peer serve` process and its store directory."""

    def __init__(self, root: Path, name: str, seeds: list[str], extra: list[str]) -> None:
        self.store = root / name
        self.address = f"127.0.0.1:{free_port()}"
        self.args = [
            sys.executable, "-m", "shipyard.cli.main", "peer", "serve",
            "--listen", self.address, "--store", str(self.store), "--no-fsync",
            "--seeds", ",".join(seeds), *extra,
        ]  # fmt: skip
        self.log = root / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def port(self) -> tuple[str, int]:
        host, port = self.address.rsplit(":", 1)
        return host, int(port)

    def start(self) -> "Peer":
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(self.port, timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise AssertionError(f"peer {self.address} did not start: {self.log.read_text()}")

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def metrics(self) -> dict[str, float]:
        """Scraped `GET /metrics`, keyed by the sample's name with its labels."""
        with urllib.request.urlopen(f"http://{self.address}/metrics", timeout=5) as reply:
            text = reply.read().decode()
        samples = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, value = line.rsplit(" ", 1)
                samples[key] = float(value)
        return samples

    def pieces_on_disk(self) -> set[str]:
        root = self.store / "pieces"
        return {p.name for p in root.rglob("*") if p.is_file()} if root.exists() else set()


class Cluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.peers: list[Peer] = []

    def peer(self, name: str, seeds: list[str], *extra: str) -> Peer:
        peer = Peer(self.root, name, seeds, list(extra))
        self.peers.append(peer)
        return peer

    def seeder(self, name: str, seeds: list[str], store: Path, *extra: str) -> Peer:
        """A peer whose store starts as a copy of `store` (not yet started)."""
        peer = self.peer(name, seeds, *extra)
        shutil.copytree(store, peer.store)
        return peer

    def stop(self) -> None:
        for peer in self.peers:
            peer.kill()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    yield c
    c.stop()


def make_artifact(store_dir: Path, source: Path, size: int) -> Manifest:
    """Random bytes as a one-file artifact of PIECE-sized pieces in a store at `store_dir`."""
    source.mkdir(parents=True, exist_ok=True)
    (source / "blob.bin").write_bytes(os.urandom(size))
    return put_tree(PieceStore(LocalBackend(store_dir, fsync=False)), source, "model", PIECE)


@pytest.fixture
def origin(tmp_path: Path) -> tuple[Path, Manifest]:
    store = tmp_path / "origin"
    return store, make_artifact(store, tmp_path / "src", 24 * PIECE + 1234)


@pytest.fixture
def http_origin(
    origin: tuple[Path, Manifest],
) -> Iterator[tuple[str, Manifest, list[int], Counter[str]]]:
    """The origin store behind a static HTTP server that counts the piece bytes it sends, and
    every GET by the key asked for (found or not)."""
    store, manifest = origin
    served: list[int] = []
    asked: Counter[str] = Counter()

    class Counting(SimpleHTTPRequestHandler):
        def do_GET(self) -> None:
            asked[self.path.lstrip("/")] += 1
            path = Path(self.translate_path(self.path))
            if "/pieces/" in self.path and path.is_file():
                served.append(path.stat().st_size)
            super().do_GET()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Counting, directory=str(store)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", manifest, served, asked
    server.shutdown()
    server.server_close()


def read_request(conn: socket.socket) -> dict[str, object]:
    (length,) = struct.unpack(">I", conn.recv(4, socket.MSG_WAITALL))
    request: dict[str, object] = json.loads(conn.recv(length, socket.MSG_WAITALL))
    return request


def answer_each(conn: socket.socket, reply: Callable[[dict[str, object]], bytes]) -> None:
    """Answer the requests on one connection in order, each with `reply(request)`, until the
    requester hangs up."""
    with conn:
        while True:
            try:
                request = read_request(conn)
            except (struct.error, OSError):
                return
            conn.sendall(reply(request))


ACCEPTED: list[tuple[str, int]] = []  # every connection the `peer` fixture accepted


@pytest.fixture
def peer() -> Iterator[Callable[[Callable[[socket.socket], None]], tuple[str, int]]]:
    """A listening socket whose accepted connections run `behave(conn)` on a thread."""
    listeners: list[socket.socket] = []
    ACCEPTED.clear()

    def start(behave: Callable[[socket.socket], None]) -> tuple[str, int]:
        listener = socket.create_server(("127.0.0.1", 0))
        listeners.append(listener)

        def serve() -> None:
            while True:
                try:
                    conn, source = listener.accept()
                except OSError:
                    return
                ACCEPTED.append(source)
                threading.Thread(target=behave, args=(conn,), daemon=True).start()

        threading.Thread(target=serve, daemon=True).start()
        host, port = listener.getsockname()
        return host, port

    yield start
    for listener in listeners:
        listener.close()
