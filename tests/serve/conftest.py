"""Serving fixtures: a tiny random Llama with SmolLM2's tokenizer, and replica processes.

`tiny_model_dir` is the shared tiny Llama of tests/conftest.py; `tiny_model` stores it in the
test's workspace as a model artifact under the alias "tiny". `start_replica(...)` runs
`python -m shipyard.serve.replica` and returns once it printed its `listening` line.
"""

import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from shipyard.serve.models import put_model_dir
from shipyard.workspace import Workspace

if TYPE_CHECKING:
    from shipyard.serve.engine import GenRequest
    from shipyard.serve.engine.request import Event


@pytest.fixture(scope="session")
def tiny_model_dir(tiny_llama_dirs: Callable[[int], Path]) -> Path:
    return tiny_llama_dirs(0)


@dataclass(frozen=True)
class TinyModel:
    alias: str
    id: str
    path: Path  # the HF directory it was made from


@pytest.fixture
def tiny_model(workspace: Workspace, tiny_model_dir: Path) -> TinyModel:
    record = put_model_dir(workspace, tiny_model_dir, "tiny", source="test:tiny-llama")
    return TinyModel("tiny", record.id, tiny_model_dir)


@dataclass
class Replica:
    proc: subprocess.Popen[str]
    url: str
    stderr: list[str] = field(default_factory=list)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def replica_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false"
    )
    return env


def start_replica_process(args: list[str], timeout: float = 120.0) -> Replica:
    """Start `python -m shipyard.serve.replica ARGS` and wait for its `listening` line."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "shipyard.serve.replica", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=replica_env(),
    )
    lines: queue.Queue[str | None] = queue.Queue()
    replica = Replica(proc, "")

    def pump_stdout() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    def pump_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            replica.stderr.append(line)

    threading.Thread(target=pump_stdout, daemon=True).start()
    threading.Thread(target=pump_stderr, daemon=True).start()
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            line = lines.get(timeout=max(0.01, left))
        except queue.Empty:
            line = None
        if line and line.startswith("listening "):
            replica.url = line.split()[1]
            return replica
        if line is None:
            replica.stop()
            pytest.fail(f"replica did not start: {''.join(replica.stderr)[-3000:]}")


@pytest.fixture
def start_replica() -> Iterator[Callable[..., Replica]]:
    """`start_replica("--model", "tiny", ...)`; every replica started is stopped at teardown."""
    started: list[Replica] = []

    def start(*args: str, timeout: float = 120.0) -> Replica:
        replica = start_replica_process(list(args), timeout)
        started.append(replica)
        return replica

    yield start
    for replica in started:
        replica.stop()


def collect(request: "GenRequest", timeout: float = 60.0) -> tuple[list[int], "Event"]:
    """Every token id an engine request produced, and its last event (Done or Failed)."""
    from shipyard.serve.engine import Token

    tokens = []
    while True:
        event = request.events.get(timeout=timeout)
        if not isinstance(event, Token):
            return tokens, event
        tokens.append(event.token_id)


def reference_greedy(model: Any, ids: list[int], new_tokens: int) -> list[int]:
    """What `model.generate` gives greedily for `ids` alone."""
    import torch

    with torch.no_grad():
        out = model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones((1, len(ids)), dtype=torch.long),
            max_new_tokens=new_tokens,
            do_sample=False,
        )
    return [int(t) for t in out[0, len(ids) :]]
