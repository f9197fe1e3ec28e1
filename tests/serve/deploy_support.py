"""Helpers shared by the deployment tests: a router fixture, a controller in a thread, the CLI."""

import argparse
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


@pytest.fixture(name="router")
def router_fixture(shipyard_home: Path) -> Iterator[str]:
    """A router process under this test's `$SHIPYARD_HOME`."""
    process = rp.start_router(shipyard_home)
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


def complete(
    router: str, prompt: str, model: str = "chat", key: str | None = None
) -> httpx.Response:
    body = {"model": model, "prompt": prompt, "max_tokens": 4, "temperature": 0, "seed": 0}
    auth = {"authorization": f"Bearer {key}"} if key else {}
    return httpx.post(f"{router}/v1/completions", json=body, headers=auth, timeout=60)
