"""The one way Shipyard loads a causal LM to run: the replica, the evals and RL all call it.

A Hugging Face directory (config, weights, tokenizer) becomes a float32 model in eval mode on the
CPU, with its tokenizer and the token ids that end a generation (the generation config's and the
tokenizer's end-of-sequence ids).
"""

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shipyard.errors import InvalidInput


@dataclass(frozen=True)
class Loaded:
    model: Any  # a transformers causal LM, eval mode, float32
    tokenizer: Any
    stop_ids: frozenset[int]  # a generated token in here ends the completion
    path: Path


def load_causal_lm(model_dir: Path, threads: int | None = None) -> Loaded:
    """Load `model_dir`; `threads` sets torch's intra-op threads (None leaves them as they are)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if not (model_dir / "config.json").is_file():
        raise InvalidInput(f"{model_dir} is not a Hugging Face model directory (no config.json)")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if threads is not None:
        torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.train(False)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    stop_ids = set(_as_ints(model.generation_config.eos_token_id))
    if tokenizer.eos_token_id is not None:
        stop_ids.add(int(tokenizer.eos_token_id))
    return Loaded(model, tokenizer, frozenset(stop_ids), model_dir)


def _as_ints(value: object) -> list[int]:
    """A generation config's eos_token_id: none, one id or a list of them."""
    if isinstance(value, int):
        return [value]
    if isinstance(value, list | tuple):
        return [int(v) for v in value]
    return []
