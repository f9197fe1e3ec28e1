"""The policy: a Hugging Face causal LM of the configured small shape, and its weights on disk.

It is a `LlamaForCausalLM` over the task's character vocabulary, so the serving engine (which
drives HF models with a KV cache) samples the rollouts and the trainer trains the same module.
"""

from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch.nn import functional
from transformers import LlamaConfig, LlamaForCausalLM

from shipyard.rl.tasks import BOS, EOS, PAD
from shipyard.train.config import ModelConfig


def build(cfg: ModelConfig, seed: int) -> LlamaForCausalLM:
    """A freshly initialised policy; the same `seed` gives the same weights."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.d_model,
        intermediate_size=4 * cfg.d_model,
        num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.n_heads,
        max_position_embeddings=cfg.seq_len,
        bos_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=PAD,
        tie_word_embeddings=False,  # safetensors files hold no shared tensors
    )
    model = LlamaForCausalLM(config)
    model.train(False)
    return model


def save_weights(model: torch.nn.Module, path: Path) -> None:
    """Atomically: a reader never sees a half-written file."""
    temp = path.with_name(f".{path.name}.tmp")
    save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()}, str(temp))
    temp.replace(path)


def load_weights(model: torch.nn.Module, path: Path) -> None:
    """Load `path` into `model`; ValueError, with `model` untouched, when its tensors do not fit
    (another shape, or an older policy's weights)."""
    tensors = load_file(str(path))
    own = model.state_dict()
    missing, unexpected = sorted(own.keys() - tensors.keys()), sorted(tensors.keys() - own.keys())
    reshaped = sorted(k for k in own.keys() & tensors.keys() if own[k].shape != tensors[k].shape)
    for what, names in (("missing", missing), ("unexpected", unexpected), ("reshaped", reshaped)):
        if names:
            raise ValueError(f"{len(names)} tensors {what}, the first {names[0]}")
    model.load_state_dict(tensors)


def logits(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """Next-token logits (batch, length, vocab) for right-padded `tokens`: causal attention
    never lets a row's padding reach its real tokens."""
    out: torch.Tensor = model(input_ids=tokens).logits
    return out


def pack(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded (batch, length) tokens and their lengths."""
    width = max(len(r) for r in rows)
    tokens = torch.full((len(rows), width), PAD, dtype=torch.long)
    for i, row in enumerate(rows):
        tokens[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return tokens, torch.tensor([len(r) for r in rows])


def token_logprobs(
    model: torch.nn.Module, rows: list[list[int]], starts: list[int]
) -> list[torch.Tensor]:
    """Log-probs of each row's tokens from index `starts[i]` on, each given those before it (the
    trainer's forward pass, with gradients; rollouts take theirs from the engine)."""
    tokens, _ = pack(rows)
    logp = functional.log_softmax(logits(model, tokens[:, :-1]).float(), dim=-1)
    picked = logp.gather(2, tokens[:, 1:].unsqueeze(2)).squeeze(2)
    return [picked[i, starts[i] - 1 : len(row) - 1] for i, row in enumerate(rows)]


def prompt_row(prompt_tokens: list[int]) -> list[int]:
    return [BOS, *prompt_tokens]
