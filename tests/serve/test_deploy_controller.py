"""The controller and CLI around it, without a model: an OpenAI-compatible server plugged in by
URL (the router tests' stand-in replica), refusals named with exit codes, the record."""

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from shipyard.errors import Conflict
from shipyard.httpguard.apikeys import hash_key, new_key
from shipyard.serve.deploy.controller import Controller
from shipyard.serve.deploy.spec import parse_spec

from .deploy_support import Running, cli, complete, router_fixture  # noqa: F401
from .router_stub import Proc, start_stub


@pytest.fixture
def external() -> Any:
    stub: Proc = start_stub("ext")
    yield stub.url
    stub.stop()


def test_the_specs_api_keys_guard_its_inference_at_the_router(
    shipyard_home: Path, router: str, external: str
) -> None:
    key = new_key()
    spec = (
        f"name: ext\nmodel: served-elsewhere\nengine: {{kind: openai, url: '{external}'}}\n"
        f"api_keys: ['{hash_key(key)}']\n"
    )
    running = Running(spec, router, shipyard_home)
    try:
        assert complete(router, "Hello", model="ext").status_code == 401
        body = {"model": "ext", "prompt": "Hello", "max_tokens": 4}
        auth = {"authorization": f"Bearer {key}"}
        reply = httpx.post(f"{router}/v1/completions", json=body, headers=auth, timeout=60)
        assert reply.status_code == 200, reply.text
    finally:
        running.close()
    logs = shipyard_home / "serve" / "logs"  # the processes' logs are this user's alone
    assert stat.S_IMODE(logs.stat().st_mode) == 0o700
    assert stat.S_IMODE((logs / "router.log").stat().st_mode) == 0o600


def test_openai_engine_is_routed_by_url_and_refuses_a_rollout(
    shipyard_home: Path, router: str, external: str, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = f"name: ext\nmodel: served-elsewhere\nengine: {{kind: openai, url: '{external}'}}\n"
    running = Running(spec, router, shipyard_home)
    try:
        reply = complete(router, "Hello", model="ext")
        assert reply.status_code == 200, reply.text
        assert reply.json()["choices"][0]["text"].startswith("ext")

        assert cli("status", "--json") == 0
        records = json.loads(capsys.readouterr().out)
        assert [r["name"] for r in records] == ["ext"] and records[0]["status"] == "running"
        assert records[0]["replicas"]["external"][0]["url"] == external

        assert cli("rollout", "ext", "--to", "anything") == 2
        assert "needs engine transformers" in capsys.readouterr().out

        second = Controller(parse_spec(spec), router, shipyard_home)
        with pytest.raises(Conflict, match="already has a controller"):
            second.start()
        second.close()  # a refused controller leaves the first one's record and route alone
        assert complete(router, "Hello", model="ext").status_code == 200
        assert (
            json.loads((shipyard_home / "serve/deployments/ext.json").read_text())["status"]
            == "running"
        )
    finally:
        running.close()
    assert cli("status", "ext") == 0
    assert "ext: stopped" in capsys.readouterr().out
    assert httpx.get(f"{router}/admin/deployments/ext", timeout=10).status_code in (401, 404)
    assert cli("rollout", "ext", "--to", "x") == 2  # no running controller to ask
    assert "no running controller" in capsys.readouterr().out


def test_cli_refusals_name_what_and_exit_by_kind(
    shipyard_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli("status", "nope") == 4
    assert "no deployment named 'nope'" in capsys.readouterr().out
    assert cli("status") == 0 and "no deployments" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: chat\nmodel: tiny\nreplicas: {min: 4, max: 2}\n")
    assert cli("deploy", str(bad)) == 2
    assert "replicas: min 4, max 2" in capsys.readouterr().out
    assert cli("rollback", "BAD NAME") == 2


def test_unknown_model_is_refused_before_anything_starts(
    shipyard_home: Path, workspace: Any, router: str
) -> None:
    from shipyard.errors import NotFound

    ctrl = Controller(parse_spec("name: chat\nmodel: ghost\n"), router, shipyard_home)
    with pytest.raises(NotFound, match="no artifact or alias named 'ghost'"):
        ctrl.start()
    ctrl.close()
    assert cli("status", "chat") == 4  # no record was made
    assert not (shipyard_home / "serve/logs").exists() or not any(
        p.name.startswith("chat-") for p in (shipyard_home / "serve/logs").iterdir()
    )


# `shipyard serve deploy` as its own process, through this module's `register` (the line the
# lead adds to cli/main.py makes it `shipyard serve deploy`).
DEPLOY = (
    "import argparse, sys\n"
    "from shipyard.cli import serve\n"
    "parser = argparse.ArgumentParser()\n"
    "serve.register(parser.add_subparsers())\n"
    "args = parser.parse_args(sys.argv[1:])\n"
    "sys.exit(args.func(args))\n"
)


@contextmanager
def deploy_process(external: str, tmp_path: Path) -> Iterator[tuple["subprocess.Popen[str]", str]]:
    """`shipyard serve deploy` of an external engine, serving: the process and its router."""
    spec = tmp_path / "ext.yaml"
    spec.write_text(f"name: ext\nmodel: elsewhere\nengine: {{kind: openai, url: '{external}'}}\n")
    process = subprocess.Popen(
        [sys.executable, "-c", DEPLOY, "serve", "deploy", str(spec)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first.startswith("deployment ext: 1 replica(s) of external behind http://"), first
        router = first.split(" behind ")[1].split()[0]
        assert complete(router, "Hi", model="ext").status_code == 200
        yield process, router
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_deploy_process_starts_its_router_and_stops_cleanly_on_sigterm(
    shipyard_home: Path, external: str, tmp_path: Path
) -> None:
    with deploy_process(external, tmp_path) as (process, router):
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    record = json.loads((shipyard_home / "serve/deployments/ext.json").read_text())
    assert record["status"] == "stopped" and record["router"] == router
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{router}/v1/models", timeout=5)  # its router went with it


def test_a_sigkilled_deploy_process_takes_its_router_with_it(
    shipyard_home: Path, external: str, tmp_path: Path
) -> None:
    with deploy_process(external, tmp_path) as (process, router):
        process.kill()
        process.wait()
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(f"{router}/v1/models", timeout=5)
        except httpx.TransportError:
            break  # the router went with its controller, SIGKILL and all
        assert time.monotonic() < deadline, "the router outlived its SIGKILLed controller"
        time.sleep(0.2)


def test_a_fresh_host_pulls_the_model_through_its_peer_daemon(
    shipyard_home: Path, tiny_model: Any, tmp_path: Path
) -> None:
    """`engine.peer`: on a host whose workspace has never seen the model, the controller has the
    host's daemon pull it (here from the origin: the first host's store) before anything loads."""
    from shipyard.serve.deploy import replicas as rp
    from shipyard.workspace import Workspace

    fresh = tmp_path / "fresh-host"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{sock.getsockname()[1]}"
    daemon = subprocess.Popen(
        [sys.executable, "-m", "shipyard.cli.main", "peer", "serve", "--listen", address,
         "--store", str(fresh / "store"), "--origin", str(shipyard_home / "store"), "--no-fsync"],
        env={**os.environ, "SHIPYARD_HOME": str(fresh)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    router = rp.start_router(fresh)
    spec = f"name: fresh\nmodel: {tiny_model.id}\nreplicas: {{min: 0, max: 1}}\n"
    ctrl = Controller(parse_spec(spec + f"engine: {{peer: '{address}'}}\n"), router.url, fresh)
    try:
        ctrl.start()  # at min 0 nothing loads: what is checked is the pull
        ws = Workspace.open(fresh)
        try:
            assert ws.resolve(tiny_model.id) == tiny_model.id
            assert ws.verify(tiny_model.id) == []
        finally:
            ws.close()
        log = (fresh / "serve/deployments/fresh.decisions.jsonl").read_text().splitlines()
        pulled = [json.loads(line) for line in log if '"pull"' in line]
        assert pulled[0]["artifact"] == tiny_model.id
        assert pulled[0]["sources"] == {"origin": pulled[0]["bytes"]}
    finally:
        ctrl.close()
        rp.stop(router)
        daemon.kill()
        daemon.wait()
