"""A Hugging Face fine-tune's checkpoint state becomes a servable model with the trained logits."""

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from shipyard.errors import IntegrityError
from shipyard.serve.model_import import hf_checkpoint_to_dir
from shipyard.serve.models import put_model_dir
from shipyard.train import hf_model
from shipyard.train.config import LoraConfig, ModelConfig
from shipyard.workspace import Workspace


def trained_state(base: Path, base_ref: str, lora: LoraConfig) -> tuple[torch.nn.Module, dict]:
    """The base model with every trainable tensor moved, as training would, and its state."""
    model = hf_model.build(base, lora)
    noise = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in hf_model.trainable(model).values():
            param.add_(0.05 * torch.randn(param.shape, generator=noise))
    cfg = ModelConfig(kind="hf", source=base_ref, seq_len=16)
    state = {"model": hf_model.trainable(model), "hf": hf_model.describe(cfg, lora)}
    return model.eval(), state


def logits(model: torch.nn.Module) -> torch.Tensor:
    tokens = torch.arange(0, 4000, 250).reshape(2, 8)
    with torch.no_grad():
        out: torch.Tensor = model(input_ids=tokens).logits
    return out


@pytest.mark.parametrize("rank", [0, 4])
def test_a_finetune_imports_with_the_trained_logits(
    workspace: Workspace, tiny_llama_dirs: Callable[[int], Path], tmp_path: Path, rank: int
) -> None:
    base = put_model_dir(workspace, tiny_llama_dirs(0), "base", source="test")
    lora = LoraConfig(rank=rank, targets=("q_proj", "down_proj"))
    model, state = trained_state(tiny_llama_dirs(0), base.id, lora)
    names = state["model"].keys()
    if rank:
        assert names and all("lora_" in n for n in names)
    else:  # every weight, the tied head once (as the embedding)
        assert "model.embed_tokens.weight" in names and "lm_head.weight" not in names
    expected = logits(model)
    out = tmp_path / "out"
    assert hf_checkpoint_to_dir(workspace, state, out, print) == base.id
    saved = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert not any("lora" in name for name, _ in saved.named_parameters())  # merged
    assert torch.allclose(logits(saved), expected, rtol=1e-4, atol=1e-4)  # merging rounds
    assert (out / "chat_template.jinja").read_text() == (
        tiny_llama_dirs(0) / "chat_template.jinja"
    ).read_text()


def test_an_import_that_lost_the_training_is_refused(
    workspace: Workspace,
    tiny_llama_dirs: Callable[[int], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, state = trained_state(tiny_llama_dirs(0), str(tiny_llama_dirs(0)), LoraConfig(rank=2))
    export = hf_model.export

    def forgetful(model: torch.nn.Module, base: Path, out: Path) -> torch.nn.Module:
        """A conversion bug, which no real input produces: the base's weights are saved."""
        merged = export(model, base, out)
        shutil.copy(base / "model.safetensors", out / "model.safetensors")
        return merged

    monkeypatch.setattr(hf_model, "export", forgetful)
    with pytest.raises(IntegrityError, match="the saved model disagrees with the trained one"):
        hf_checkpoint_to_dir(workspace, state, tmp_path / "out", print)
