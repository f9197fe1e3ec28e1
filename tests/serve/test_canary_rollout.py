"""Canaries end to end: real router, real replica processes, a real controller loop.

The eval gate's expected answers are the current version's greedy outputs; a version with noise
added to its weights answers otherwise and is rolled back by the gate, the alias unmoved; a good
one is promoted and the alias moves; an alias moved by someone else makes the CAS fail safely.
"""

import argparse
import json
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from shipyard.cli import serve as serve_cli
from shipyard.errors import ShipyardError
from shipyard.serve.deploy import replicas as rp
from shipyard.serve.deploy.controller import Controller
from shipyard.serve.deploy.loop import run
from shipyard.serve.deploy.spec import parse_spec
from shipyard.serve.models import put_model_dir
from shipyard.workspace import Workspace

PROMPTS = [f"Item {n}: the answer is" for n in range(20)]


def perturbed(source: Path, dest: Path, scale: float) -> Path:
    """`source` with Gaussian noise of std `scale` added to every weight, saved to `dest`."""
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(source, dest)
    weights = load_file(source / "model.safetensors")
    generator = torch.Generator().manual_seed(1)
    noisy = {
        k: (v + scale * torch.randn(v.shape, generator=generator)).to(v.dtype)
        for k, v in weights.items()
    }
    save_file(noisy, dest / "model.safetensors", metadata={"format": "pt"})
    return dest


def cli(*argv: str) -> int:
    """Run `shipyard serve ...` through this module's parser, mapping errors to exit codes."""
    parser = argparse.ArgumentParser(prog="shipyard")
    serve_cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["serve", *argv])
    try:
        code: int = args.func(args)
    except ShipyardError as exc:
        print(f"error: {exc}")
        return exc.exit_code
    return code


def wait_for(check: Callable[[], Any], timeout: float = 60.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


@pytest.fixture
def router(shipyard_home: Path) -> Iterator[str]:
    process = rp.start_router(shipyard_home / "serve" / "logs")
    yield process.url
    rp.stop(process)


class Running:
    """A controller in a thread of this process, as `shipyard serve deploy` runs one."""

    def __init__(self, spec_text: str, router: str, home: Path) -> None:
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.ctrl: Controller | None = None
        self.thread = threading.Thread(target=self._run, args=(spec_text, router, home))
        self.thread.start()
        assert self.ready.wait(120) and self.error is None, self.error

    def _run(self, spec_text: str, router: str, home: Path) -> None:
        ctrl = Controller(parse_spec(spec_text), router, home)
        try:
            ctrl.start()
            self.ctrl = ctrl
        except BaseException as exc:
            self.error = exc
            raise
        finally:
            self.ready.set()
        try:
            run(ctrl, self.stop)
        finally:
            ctrl.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(60)


def complete(router: str, prompt: str, model: str = "chat") -> httpx.Response:
    body = {"model": model, "prompt": prompt, "max_tokens": 4, "temperature": 0, "seed": 0}
    return httpx.post(f"{router}/v1/completions", json=body, timeout=60)


def test_canary_rolls_back_a_broken_version_and_promotes_a_good_one(
    shipyard_home: Path, workspace: Workspace, tiny_model: Any, router: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    broken = put_model_dir(
        workspace, perturbed(tiny_model.path, tmp_path / "broken", 0.5), None, source="test:noisy"
    )
    good = put_model_dir(
        workspace, perturbed(tiny_model.path, tmp_path / "good", 1e-5), None, source="test:good"
    )
    items = tmp_path / "gate.jsonl"
    spec = f"""
name: chat
model: tiny
replicas: {{min: 1, max: 2}}
autoscale: {{interval_s: 3600}}
canary: {{stages: [1, 5, 25, 100], hold_s: 0.2}}
eval_gate: {{items: {items}}}
"""
    running = Running(spec, router, shipyard_home)
    try:
        ctrl = running.ctrl
        assert ctrl is not None
        current_pid = ctrl.replicas[ctrl.current][0].pid
        # The gate's items: what the version in production answers now, through the router
        lines = []
        for prompt in PROMPTS:
            reply = complete(router, prompt)
            assert reply.status_code == 200, reply.text
            lines.append({"prompt": prompt, "expected": reply.json()["choices"][0]["text"],
                          "match": "exact", "max_tokens": 4})  # fmt: skip
        items.write_text("".join(json.dumps(line) + "\n" for line in lines))

        assert cli("rollout", "chat", "--to", broken.id) == 1
        out = capsys.readouterr().out
        assert "stage 1%: fail (eval gate: " in out and "rolled_back" in out
        assert workspace.catalog.get_alias("tiny") == tiny_model.id  # the alias did not move
        assert ctrl.replicas[ctrl.current][0].pid == current_pid  # stayed warm throughout
        assert broken.id[:12] not in ctrl.replicas  # the candidate's replicas are gone
        assert complete(router, PROMPTS[0]).json()["choices"][0]["text"] == lines[0]["expected"]

        assert cli("rollout", "chat", "--to", good.id) == 0
        out = capsys.readouterr().out
        assert [line.split(":")[0] for line in out.splitlines() if line.startswith("stage")] == [
            "stage 1%", "stage 5%", "stage 25%",
        ]  # fmt: skip
        assert workspace.catalog.get_alias("tiny") == good.id  # moved, by CAS, at 100%
        assert ctrl.current == good.id[:12] and ctrl.previous == tiny_model.id[:12]
        stats = httpx.get(f"{router}/v1/models", timeout=10)
        assert stats.status_code == 200

        assert cli("status", "chat") == 0
        out = capsys.readouterr().out
        assert f"{good.id[:16]} current" in out and f"{tiny_model.id[:16]} previous" in out

        # Back to the warm previous version: the alias moves back by CAS too
        assert cli("rollback", "chat") == 0
        assert workspace.catalog.get_alias("tiny") == tiny_model.id
        assert ctrl.current == tiny_model.id[:12]

        # Someone moves the alias meanwhile: the promotion's CAS fails, nothing is overwritten
        workspace.move_alias("tiny", broken.id)
        assert cli("rollout", "chat", "--to", good.id) == 3
        assert "moved concurrently" in capsys.readouterr().out
        assert workspace.catalog.get_alias("tiny") == broken.id
        assert ctrl.current == tiny_model.id[:12]
        assert complete(router, PROMPTS[1]).json()["choices"][0]["text"] == lines[1]["expected"]

        decisions = [
            json.loads(line)
            for line in (shipyard_home / "serve/deployments/chat.decisions.jsonl").open()
        ]
        canary = [d for d in decisions if d["kind"] == "canary"]
        assert {"begin", "fail", "pass", "promote", "rollback", "cas-failed"} <= {
            d["action"] for d in canary
        }
        failed = next(d for d in canary if d["action"] == "fail")
        assert failed["inputs"]["eval"][0]["passed"] < 20 == failed["inputs"]["eval"][1]["passed"]
    finally:
        running.close()
    assert json.loads((shipyard_home / "serve/deployments/chat.json").read_text())["status"] == (
        "stopped"
    )
