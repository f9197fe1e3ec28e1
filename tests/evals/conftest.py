"""Eval fixtures: tiny random Llamas over SmolLM2's tokenizer, stored as model artifacts."""

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from shipyard.queue import Queue, open_queue
from shipyard.workspace import Workspace

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture
def put_tiny(workspace: Workspace, tiny_llama_dirs: Callable[[int], Path]) -> Callable[[int], str]:
    """`put_tiny(seed)`: that tiny model stored in the test's workspace; returns its id."""

    def put(seed: int = 0) -> str:
        metadata = {"format": "hf", "architecture": "LlamaForCausalLM", "source": "test"}
        return workspace.put(tiny_llama_dirs(seed), "model", metadata=metadata).id

    return put


@pytest.fixture
def queue(shipyard_home: Path) -> Iterator[Queue]:
    q = open_queue()
    yield q
    q.close()
