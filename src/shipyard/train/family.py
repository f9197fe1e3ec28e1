"""Model families the trainer runs: how a rank builds its model, computes a batch's loss, fills
and restores a checkpoint's model entries, and exports the final model.

"gpt" is Shipyard's own small GPT (its whole state in each checkpoint, exported as safetensors
plus its config); "hf" fine-tunes a Hugging Face causal LM (only its trainable tensors in each
checkpoint, exported as an HF directory with LoRA merged). The worker sees only `Family`.
"""

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

import torch
from safetensors.torch import save_file
from torch import nn

from shipyard.train.config import TrainConfig
from shipyard.train.model import GPT, next_token_loss, shifted_loss


class Family(Protocol):
    model: nn.Module  # what DDP wraps

    def loss(self, ddp: nn.Module, tokens: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """Mean next-token cross-entropy over the targets (`mask`'s, or every token)."""
        ...

    def state(self) -> dict[str, Any]:
        """The checkpoint's entries for the model (the optimizer's are the worker's)."""
        ...

    def load(self, state: dict[str, Any]) -> None:
        """Restore what `state` saved."""
        ...

    def export(self, out: Path) -> None:
        """Write the trained model into the directory `out` (rank 0, after the last step)."""
        ...


class GPTFamily:
    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        self.model: nn.Module = GPT(cfg.model)

    def loss(self, ddp: nn.Module, tokens: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        return next_token_loss(ddp, tokens, mask)

    def state(self) -> dict[str, Any]:
        return {"model": self.model.state_dict()}

    def load(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])

    def export(self, out: Path) -> None:
        tensors = {k: v.contiguous() for k, v in self.model.state_dict().items()}
        save_file(tensors, str(out / "model.safetensors"))
        (out / "config.json").write_text(json.dumps(asdict(self.cfg.model), indent=2))


class HFFamily:
    """The base model is read from `<run dir>/base` (linked by `create_run`), after any fork."""

    def __init__(self, cfg: TrainConfig, run_dir: Path) -> None:
        from shipyard.train import hf_model

        self.cfg = cfg
        self.base = run_dir / hf_model.BASE_LINK
        self.model = hf_model.build(self.base, cfg.lora)

    def loss(self, ddp: nn.Module, tokens: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        logits = ddp(input_ids=tokens[:, :-1], use_cache=False).logits
        return shifted_loss(logits, tokens, mask)

    def state(self) -> dict[str, Any]:
        from shipyard.train import hf_model

        description = hf_model.describe(self.cfg.model, self.cfg.lora)
        return {"model": hf_model.trainable(self.model), hf_model.STATE_KEY: description}

    def load(self, state: dict[str, Any]) -> None:
        from shipyard.train import hf_model

        hf_model.load_trainable(self.model, state["model"])

    def export(self, out: Path) -> None:
        from shipyard.train import hf_model

        self.model = hf_model.export(self.model, self.base, out)


def build_family(cfg: TrainConfig, run_dir: Path) -> Family:
    if cfg.model.kind == "hf":
        return HFFamily(cfg, run_dir)
    return GPTFamily(cfg)
