"""Fixtures for the sandbox tests: a real host, real sandboxes, a real service process."""

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from shipyard.sandbox import Host, Limits, Sandbox
from shipyard.sandbox.client import Client
from shipyard.sandbox.server import socket_path


def _can_sandbox() -> str:
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed"
    probe = subprocess.run(
        ["bwrap", "--unshare-all", "--ro-bind", "/", "/", "true"], capture_output=True, text=True
    )
    return "" if probe.returncode == 0 else f"bubblewrap cannot start here: {probe.stderr}"


_WHY_NOT = _can_sandbox()
if _WHY_NOT:
    pytest.skip(_WHY_NOT, allow_module_level=True)

SMALL = Limits(memory_mib=96, pids=24, cpus=1.0, disk_mib=16, files=4096, output_bytes=64 << 10)


def wait_for(condition: Callable[[], object], timeout: float = 20.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or condition}")
        time.sleep(0.02)


@pytest.fixture
def host(shipyard_home: Path) -> Iterator[Host]:
    made = Host(shipyard_home)
    yield made
    made.close()
    assert made.leaks().total == 0, made.leaks()


@pytest.fixture
def box(host: Host) -> Iterator[Sandbox]:
    started = host.start(host.images.resolve("host"), SMALL)
    started.wait_ready()
    yield started
    started.close()


class Service:
    """`shipyard sandbox serve` as a real process, which tests may SIGKILL and restart."""

    def __init__(self, home: Path, *options: str) -> None:
        self.home = home
        self.options = options
        self.process: subprocess.Popen[bytes] | None = None
        self.log = home / "serve.log"  # the service's stderr, for a failing test to show

    def start(self) -> None:
        path = socket_path(self.home)
        path.unlink(missing_ok=True)
        command = [sys.executable, "-m", "shipyard", "sandbox", "serve", *self.options]
        env = {**os.environ, "SHIPYARD_HOME": str(self.home)}
        self.home.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(command, env=env, stderr=log)
        wait_for(lambda: path.exists() or self.process.poll() is not None, 60, "the socket")
        if self.process.poll() is not None:
            raise AssertionError(self.log.read_text())

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(60)

    def client(self, lease_s: float = 15.0) -> Client:
        return Client(socket_path(self.home), lease_s=lease_s)


@pytest.fixture
def service(shipyard_home: Path) -> Iterator[Service]:
    running = Service(shipyard_home, "--pool-min", "1", "--pool-max", "4", "--lease-s", "3")
    running.start()
    yield running
    running.stop()
