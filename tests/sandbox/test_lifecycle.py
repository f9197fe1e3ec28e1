"""Leases, TTLs and the reaper: a dead driver's sandboxes go; a killed service leaves nothing."""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from shipyard.errors import NotFound
from shipyard.sandbox import Host, Outcome
from shipyard.sandbox.server import socket_path

from .conftest import SMALL, Service, wait_for

DRIVER = """
import sys, time
from pathlib import Path
from shipyard.sandbox.client import Client
client = Client(Path(sys.argv[1]), lease_s=1.0)
box = client.create()
box.exec(["sh", "-c", "sleep 1000 &"])
print(box.id, flush=True)
time.sleep(1000)
"""


def test_a_dead_driver_s_sandbox_is_reaped(service: Service) -> None:
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(socket_path(service.home))],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert driver.stdout is not None
    sandbox_id = driver.stdout.readline().strip()
    with service.client() as client:
        assert client.status()["active"] == 1
        wait_for(lambda: client.status()["active"] == 1, 3)  # heartbeats keep it past its lease
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        wait_for(lambda: client.status()["active"] == 0, 20, "the reaper")
        assert client.status()["reaped"].get("lease") == 1
        with pytest.raises(NotFound):
            client._conn.call("exec", id=sandbox_id, argv=["true"])


def test_ttl_ends_a_sandbox_even_mid_exec(service: Service) -> None:
    with service.client() as client:
        box = client.create(limits=SMALL, ttl_s=1.0)
        result = box.exec(["sleep", "30"], timeout=60)
        assert result.outcome is Outcome.KILLED and "TTL" in result.detail, result
        assert client.status()["reaped"].get("ttl") == 1


def _leaks(home: Path) -> int:
    host = Host(home)
    try:
        found = host.leaks()
    finally:
        host.close()
    return found.total


def test_service_killed_and_restarted_leaves_no_orphans(service: Service) -> None:
    client = service.client()
    for _ in range(3):
        box = client.create(limits=SMALL)
        box.exec(["sh", "-c", "sleep 1000 & sleep 1000 &"])  # killed when exec returns
        box.exec(["sh", "-c", "echo running"])
    service.kill()  # SIGKILL: no cleanup ran
    client.close()
    service.start()
    with service.client() as again:
        assert again.status()["reaped"]["orphan"] >= 3
        with again.create(limits=SMALL) as box:
            assert box.exec(["true"]).ok
    service.stop()
    assert _leaks(service.home) == 0


def test_reaper_and_records_without_a_service(shipyard_home: Path) -> None:
    """A process that made sandboxes and died: the next host on that home reaps them."""
    script = textwrap.dedent(
        """
        import os, sys
        from pathlib import Path
        from shipyard.sandbox import Host, Limits
        host = Host(Path(sys.argv[1]))
        boxes = [host.start(host.images.resolve("host"), Limits()) for _ in range(2)]
        for box in boxes:
            box.wait_ready()
        print("ready", flush=True)
        os.kill(os.getpid(), 9)
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", script, str(shipyard_home)], capture_output=True, text=True
    )
    assert run.stdout == "ready\n", run.stderr
    host = Host(shipyard_home)
    try:
        assert host.reap_orphans() == 2
        wait_for(lambda: host.leaks().total == 0, 10, "no leaks")
    finally:
        host.close()


def test_a_dead_in_process_driver_is_reaped_by_the_next_host(shipyard_home: Path) -> None:
    """`shipyard.sandbox.create` in a process that is SIGKILLed: its groups and records go."""
    script = textwrap.dedent(
        """
        import os
        from shipyard.sandbox import create
        boxes = [create() for _ in range(2)]
        print("ready", flush=True)
        os.kill(os.getpid(), 9)
        """
    )
    env = {**os.environ, "SHIPYARD_HOME": str(shipyard_home)}
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert run.stdout == "ready\n", run.stderr
    host = Host(shipyard_home)
    try:
        assert host.reap_orphans() == 2
        wait_for(lambda: host.leaks().total == 0, 10, "no leaks")
        assert not list((shipyard_home / "sandbox").glob("state-p*"))
    finally:
        host.close()
