"""The service through its client: the API, refusals, metrics, pools."""

import dataclasses
import socket
import struct
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from shipyard.errors import Conflict, InvalidInput, NotFound
from shipyard.sandbox import Outcome
from shipyard.sandbox.server import socket_path

from ..conftest import free_port
from .conftest import SMALL, Service


def test_create_exec_files_close(service: Service) -> None:
    with service.client() as client:
        box = client.create(limits=dataclasses.replace(SMALL, output_bytes=1 << 20))
        box.put_files({"task/input.txt": b"6 7\n"})
        result = box.exec(
            [
                "python3",
                "-c",
                "a, b = map(int, open('task/input.txt').read().split()); "
                "open('answer', 'w').write(str(a * b)); print('done')",
            ],
        )
        assert result.outcome is Outcome.OK and result.stdout == b"done\n", result
        assert box.get_files(["answer", "missing"]) == {"answer": b"42"}
        echoed = box.exec(["cat"], stdin=b"x" * 300_000)
        assert echoed.stdout == b"x" * 300_000 and echoed.ok  # larger than a pipe buffer
        box.close()
        with pytest.raises(NotFound):
            box.exec(["true"])


def test_refusals_name_what_is_wrong(service: Service) -> None:
    with service.client() as client:
        with pytest.raises(InvalidInput, match=r"limits\.memory_mib"):
            client._conn.call("create", limits={"memory_mib": 1})
        with pytest.raises(InvalidInput, match="unknown field 'gpus'"):
            client._conn.call("create", limits={"gpus": 8})
        with pytest.raises(InvalidInput, match="argv"):
            client.create(limits=SMALL).exec([])
        box = client.create(limits=SMALL)
        with pytest.raises(InvalidInput, match="timeout"):
            box.exec(["true"], timeout=-1)
        with pytest.raises(InvalidInput, match=r"'\.\.'"):
            box.put_files({"../escape": b"x"})
        with pytest.raises(NotFound):
            client._conn.call("exec", id="nope", argv=["true"])
        with pytest.raises(InvalidInput, match="unknown request"):
            client._conn.call("format-disk")
        with pytest.raises(NotFound, match=r"image|artifact"):
            client.create(image="no-such-image")
        assert box.exec(["true"]).ok  # refusals left the sandbox and the service as they were


def test_malformed_frames_drop_only_that_connection(service: Service) -> None:
    path = socket_path(service.home)
    for junk in [
        b"\xff\xff\xff\xff",
        struct.pack(">I", 5) + b"[1,2]",
        struct.pack(">I", 3) + b"{\xff}",
    ]:
        with socket.socket(socket.AF_UNIX) as raw:
            raw.connect(str(path))
            raw.sendall(junk)
            raw.settimeout(10)
            assert raw.recv(100) == b""  # closed, no reply
    with service.client() as client:
        assert client.status()["active"] == 0


def test_metrics_and_pool_report(service: Service) -> None:
    with service.client() as client:
        for _ in range(3):
            with client.create(limits=SMALL) as box:
                box.exec(["sh", "-c", "exit 3"])
        status = client.status()
        text = client.metrics()
    (pool,) = status["pools"]
    assert pool["hits"] + pool["misses"] == 3
    assert pool["target"] >= 1 and pool["arrival_rate_per_s"] > 0
    assert status["outcomes"] == {"nonzero-exit": 3}
    assert 'shipyard_sandbox_execs_total{outcome="nonzero-exit"} 3.0' in text
    assert "shipyard_sandbox_pool_target" in text
    assert 'shipyard_sandbox_confinement{cap="memory",mechanism="cgroup v1"} 1.0' in text or (
        "mechanism=" in text
    )


def test_a_second_service_on_one_home_is_refused(service: Service) -> None:
    second = subprocess.run(
        [sys.executable, "-m", "shipyard", "sandbox", "serve"],
        capture_output=True,
        text=True,
        env={"SHIPYARD_HOME": str(service.home), "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert second.returncode == Conflict.exit_code, second.stderr
    assert "already runs" in second.stderr


def test_cli_run_through_the_service(service: Service, shipyard_home: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "shipyard", "sandbox", "run", "--", "python3", "-c", "print(7)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0 and run.stdout == "7\n", run.stderr
    assert "outcome: ok" in run.stderr


def test_prometheus_metrics_over_loopback_http(shipyard_home: Path) -> None:
    port = free_port()
    running = Service(shipyard_home, "--pool-min", "0", "--metrics-listen", f"127.0.0.1:{port}")
    running.start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as reply:
            text = reply.read().decode()
        assert "shipyard_sandbox_active 0.0" in text
        assert "shipyard_sandbox_confinement" in text
    finally:
        running.stop()
