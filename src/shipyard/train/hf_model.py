"""Hugging Face causal LMs in the trainer: find and check the model a run fine-tunes, load it
(float32, CPU), add LoRA adapters, and the state a checkpoint keeps of it.

A model directory is checked before anything loads it: its config, its tokenizer, every tensor of
its safetensors files against the shape its config implies (read from the file headers, against
the model built on the meta device), and the LoRA targets against its module names. A run keeps
only the trainable tensors in its checkpoints (the adapters for LoRA, every weight for a full
fine-tune): with the base model, named by the run's config, they rebuild the trained model.
"""

from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import nn

from shipyard.errors import InvalidInput, NotFound
from shipyard.serve.models import materialise
from shipyard.train.config import LoraConfig, ModelConfig
from shipyard.workspace import Workspace

BASE_LINK = "base"  # <run dir>/base: the base model's directory, linked when the run is created
STATE_KEY = "hf"  # the checkpoint entry that records the run's model and lora sections
FIELD = "train config field 'model.source'"


def source_dir(ws: Workspace, source: str, cache: Path) -> tuple[Path, str]:
    """The model directory `source` names and its artifact id ("" for a local directory): a
    local directory, else a model artifact (id, prefix, alias) fetched into `cache` (the trust
    policy decides whether it may be read)."""
    path = Path(source)
    if path.is_dir():
        return path.resolve(), ""
    if path.exists():
        raise InvalidInput(f"{FIELD}: {source} is not a directory")
    try:
        artifact_id = ws.resolve(source)
    except NotFound:
        raise InvalidInput(
            f"{FIELD}: {source!r} is neither a model directory nor a model artifact"
        ) from None
    got = materialise(ws, artifact_id, cache)
    return got.path, got.artifact_id


def check_model_dir(directory: Path, lora: LoraConfig) -> Any:
    """Refuse, by name, a directory the trainer could not fine-tune; returns its HF config."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    try:
        config = AutoConfig.from_pretrained(directory, local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise InvalidInput(
            f"{FIELD}: {directory} has no usable config.json ({_first(exc)})"
        ) from None
    try:
        AutoTokenizer.from_pretrained(directory, local_files_only=True)
    except Exception as exc:  # the tokenizer backends raise many kinds: any is a refusal
        raise InvalidInput(
            f"{FIELD}: {directory} has no usable tokenizer ({_first(exc)})"
        ) from None
    try:
        with torch.device("meta"):  # shapes only: no memory, no weights read
            skeleton = AutoModelForCausalLM.from_config(config)  # type: ignore[no-untyped-call]
    except Exception as exc:  # a config transformers cannot build a causal LM from
        raise InvalidInput(
            f"{FIELD}: {directory}: not a causal LM config ({_first(exc)})"
        ) from None
    _check_weights(directory, skeleton)
    if lora.rank:
        _check_targets(skeleton, lora.targets)
    return config


def _check_weights(directory: Path, skeleton: nn.Module) -> None:
    """Every stored tensor is one the config expects, of the shape it expects, and every
    parameter is stored (or tied to one that is): checked from the safetensors headers."""
    from safetensors import SafetensorError, safe_open

    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise InvalidInput(f"{FIELD}: {directory} has no *.safetensors weights")
    expected = {name: tuple(t.shape) for name, t in skeleton.state_dict().items()}
    stored: dict[str, tuple[int, ...]] = {}
    for file in files:
        try:
            with safe_open(str(file), "pt") as handle:
                for name in handle.keys():  # noqa: SIM118 (a safetensors handle, not a dict)
                    stored[name] = tuple(handle.get_slice(name).get_shape())
        except (SafetensorError, OSError) as exc:
            raise InvalidInput(f"{FIELD}: {file} is not a safetensors file ({exc})") from None
    for name, shape in stored.items():
        if name not in expected:
            raise InvalidInput(f"{FIELD}: {directory}: tensor {name} is not in the config's model")
        if shape != expected[name]:
            raise InvalidInput(
                f"{FIELD}: {directory}: tensor {name} has shape {list(shape)}, the config says "
                f"{list(expected[name])}"
            )
    tied: dict[int, set[str]] = {}
    for name, param in skeleton.named_parameters(remove_duplicate=False):
        tied.setdefault(id(param), set()).add(name)
    for names in tied.values():
        if not names & stored.keys():
            raise InvalidInput(f"{FIELD}: {directory}: no weights stored for {min(names)}")


def _check_targets(skeleton: nn.Module, targets: tuple[str, ...]) -> None:
    modules = dict(skeleton.named_modules())
    for target in targets:
        if not any(name == target or name.endswith("." + target) for name in modules):
            # The leaves' own names (q_proj, down_proj, ...) are what targets usually name.
            leaves = {
                name.rsplit(".", 1)[-1] for name, m in modules.items() if not list(m.children())
            }
            raise InvalidInput(
                f"train config field 'lora.targets': {target!r} matches no module of the model; "
                f"its layers are named {', '.join(sorted(leaves)[:16])}"
            )


def build(directory: Path, lora: LoraConfig) -> nn.Module:
    """The model a run trains: the base in float32 on the CPU, with LoRA adapters on the
    modules named by `lora.targets` (only they train) or, with rank 0, every weight trainable."""
    from peft import LoraConfig as PeftLora
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    model: nn.Module = AutoModelForCausalLM.from_pretrained(
        directory, dtype=torch.float32, local_files_only=True, use_safetensors=True
    )
    if lora.rank:
        adapters = PeftLora(
            r=lora.rank,
            lora_alpha=lora.alpha,  # type: ignore[arg-type]  # typed int, used as a float
            lora_dropout=lora.dropout,
            target_modules=list(lora.targets),
            task_type="CAUSAL_LM",
        )
        model = get_peft_model(model, adapters)
    model.train()
    return model


def vocab_size(model: nn.Module) -> int:
    return int(model.get_input_embeddings().num_embeddings)  # type: ignore[operator]


def trainable(model: nn.Module) -> dict[str, torch.Tensor]:
    """The tensors a checkpoint keeps: the trainable parameters, by name (tied ones once)."""
    return {name: p for name, p in model.named_parameters() if p.requires_grad}


def load_trainable(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Put a checkpoint's trainable tensors back; they must be exactly the model's."""
    params = trainable(model)
    if params.keys() != state.keys():
        extra, missing = sorted(state.keys() - params.keys()), sorted(params.keys() - state.keys())
        raise InvalidInput(
            f"checkpoint does not fit the model: unexpected {extra[:3]}, missing {missing[:3]}"
        )
    with torch.no_grad():
        for name, param in params.items():
            if tuple(state[name].shape) != tuple(param.shape):
                raise InvalidInput(f"checkpoint tensor {name}: shape {list(state[name].shape)}")
            param.copy_(state[name])


def describe(model: ModelConfig, lora: LoraConfig) -> dict[str, Any]:
    """What a checkpoint records, next to the tensors, to rebuild the trained model."""
    return {"model": asdict(model), "lora": asdict(lora)}


def read_description(state: dict[str, Any]) -> tuple[ModelConfig, LoraConfig]:
    try:
        entry = state[STATE_KEY]
        lora = dict(entry["lora"])
        lora["targets"] = tuple(lora["targets"])
        return ModelConfig(**entry["model"]), LoraConfig(**lora)
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidInput(f"checkpoint: its {STATE_KEY!r} entry is malformed ({exc!r})") from None


def export(model: nn.Module, base: Path, out: Path) -> nn.Module:
    """Save the trained model as an HF directory at `out`: LoRA merged into the base weights,
    with the base's tokenizer (chat template included) and generation config. Returns the
    merged model (the adapters' wrapper is gone)."""
    from peft import PeftModel
    from transformers import AutoTokenizer

    merged: nn.Module = model.merge_and_unload() if isinstance(model, PeftModel) else model
    merged.save_pretrained(out)  # type: ignore[operator]
    AutoTokenizer.from_pretrained(base, local_files_only=True).save_pretrained(out)
    return merged


def _first(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
