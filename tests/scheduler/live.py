"""A real `shipyard scheduler serve` process and raw HTTP requests to it, for the live tests."""

import http.client
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tests.conftest import free_port

CONFIG = {
    "nodes": [{"name": "n0", "gpus": 4}, {"name": "n1", "gpus": 4}],
    "teams": [{"team": "a", "nominal": {"gpu": 8}}],
}
T = TypeVar("T")


def wait_for(check: Callable[[], T], limit: float = 30.0) -> T:
    """Poll `check` until it returns something true, failing after `limit` seconds."""
    deadline = time.monotonic() + limit
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


@dataclass
class Live:
    url: str
    port: int
    home: Path
    output: Path
    pid: int

    @property
    def token(self) -> str:
        return (self.home / "tokens" / "scheduler.token").read_text().strip()

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        auth: bool = True,
    ) -> tuple[int, Any]:
        """One request with exactly these headers (Host included); JSON bodies by default."""
        sent = {"Host": f"127.0.0.1:{self.port}"}
        if method != "GET":
            sent["Content-Type"] = "application/json"
        if auth:
            sent["Authorization"] = f"Bearer {self.token}"
        sent.update(headers or {})
        data = body if isinstance(body, bytes) else None if body is None else json.dumps(body)
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            for name, value in sent.items():
                conn.putheader(name, value)
            payload = data.encode() if isinstance(data, str) else data
            if payload is not None and "Content-Length" not in sent:
                conn.putheader("Content-Length", str(len(payload)))
            conn.endheaders(payload)
            response = conn.getresponse()
            raw = response.read()
        finally:
            conn.close()
        kind = response.getheader("Content-Type", "")
        return response.status, json.loads(raw) if kind == "application/json" else raw.decode()


def shipyard(*args: str, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the CLI (under `home` when given, else the environment's `$SHIPYARD_HOME`)."""
    cmd = [sys.executable, "-m", "shipyard.cli.main", *args]
    env = {**os.environ, "SHIPYARD_HOME": str(home)} if home else None
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)


@contextmanager
def scheduler(home: Path, workdir: Path, config: Any = None) -> Iterator[Live]:
    """`shipyard scheduler serve` on a free loopback port until the block ends.

    On the way out it checks that the service printed no traceback, whatever it was sent.
    """
    cluster = workdir / "cluster.json"
    cluster.write_text(json.dumps(config or CONFIG))
    port = free_port()
    output = workdir / "serve.out"
    cmd = [sys.executable, "-m", "shipyard.cli.main", "scheduler", "serve"]
    cmd += ["--config", str(cluster), "--port", str(port), "--tick", "0.05"]
    with output.open("w") as out:
        env = {**os.environ, "SHIPYARD_HOME": str(home)}
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    live = Live(f"http://127.0.0.1:{port}", port, home, output, proc.pid)

    def up() -> bool:
        assert proc.poll() is None, output.read_text()
        try:
            return live.request("GET", "/status")[0] == 200
        except OSError:
            return False

    try:
        wait_for(up)
        yield live
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert "Traceback" not in output.read_text(), output.read_text()
