"""Token ids to unit vectors: length-sorted, token-budget batches on one thread, through ONNX
Runtime or sentence-transformers, with tokenization of the next block overlapped."""

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from shipyard.batch.chunker import Chunked, Chunker
from shipyard.batch.config import EncodeConfig
from shipyard.batch.snapshot import Doc
from shipyard.errors import InvalidInput

T = TypeVar("T")


class Backend(Protocol):
    def __call__(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """(batch, length) int64 ids and mask → (batch, dim) float32 unit vectors."""
        ...


def _normalize(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    out: np.ndarray = (vectors / np.maximum(norms, 1e-12)).astype(np.float32)
    return out


def mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    weights = mask[..., None].astype(np.float32)
    return _normalize((hidden * weights).sum(1) / np.maximum(weights.sum(1), 1e-9))


class OrtBackend:
    """An ONNX file with inputs input_ids, attention_mask, token_type_ids → last_hidden_state."""

    def __init__(self, path: Path) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # one thread per worker: scale out with workers
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        try:
            self.session = ort.InferenceSession(
                str(path), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own exception types
            raise InvalidInput(f"{path}: not a loadable ONNX model ({str(exc)[:200]})") from None
        self.inputs = {i.name for i in self.session.get_inputs()}

    def __call__(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.inputs:
            feed["token_type_ids"] = np.zeros_like(ids)
        (hidden,) = self.session.run(["last_hidden_state"], feed)
        return mean_pool(np.asarray(hidden), mask)


class SentenceTransformerBackend:
    """The same batches through sentence-transformers' own modules (torch, one thread)."""

    def __init__(self, model_dir: Path) -> None:
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(1)
        self.torch = torch
        self.model = SentenceTransformer(str(model_dir), device="cpu")
        self.model.eval()

    def __call__(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        torch = self.torch
        features: dict[str, Any] = {
            "input_ids": torch.from_numpy(ids),
            "attention_mask": torch.from_numpy(mask),
            "token_type_ids": torch.zeros_like(torch.from_numpy(ids)),
        }
        with torch.inference_mode():
            out = self.model(features)["sentence_embedding"]
        return _normalize(out.numpy())


def batches(lengths: list[int], config: EncodeConfig) -> list[list[int]]:
    """Indices grouped shortest first so that each batch's padded size (count × its longest)
    stays within the token budget: little padding, and big batches of short chunks."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    out: list[list[int]] = []
    current: list[int] = []
    for i in order:
        longest = lengths[i]  # sorted: the newest is the longest
        if current and (
            (len(current) + 1) * longest > config.token_budget or len(current) >= config.max_batch
        ):
            out.append(current)
            current = []
        current.append(i)
    if current:
        out.append(current)
    return out


def encode(backend: Backend, ids: list[list[int]], config: EncodeConfig, dim: int) -> np.ndarray:
    """Vectors for `ids` in their order (the batching is invisible to the caller)."""
    out = np.zeros((len(ids), dim), np.float32)
    for group in batches([len(x) for x in ids], config):
        width = max(len(ids[i]) for i in group)
        tokens = np.zeros((len(group), width), np.int64)
        mask = np.zeros((len(group), width), np.int64)
        for row, i in enumerate(group):
            tokens[row, : len(ids[i])] = ids[i]
            mask[row, : len(ids[i])] = 1
        out[group] = backend(tokens, mask)
    return out


def prefetch(source: Iterable[T], depth: int = 2) -> Iterator[T]:
    """Run `source` on a second thread, `depth` items ahead: reading and tokenizing the next
    block (Rust and pyarrow, which let go of the GIL) while this thread runs the model."""
    box: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in source:
                if stop.is_set():
                    return
                box.put(("item", item))
            box.put(("end", None))
        except BaseException as exc:  # handed to the consumer, raised there
            box.put(("error", exc))

    thread = threading.Thread(target=produce, name="batch-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            kind, value = box.get()
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value
    finally:
        stop.set()


def embed_blocks(
    blocks: Iterable[list[Doc]],
    chunker: Chunker,
    backend: Backend,
    config: EncodeConfig,
    dim: int,
    on_block: Callable[[Chunked], None] | None = None,
) -> Iterator[tuple[Chunked, np.ndarray]]:
    """(chunks, vectors) per block of documents, tokenizing one block ahead."""
    for chunked in prefetch(chunker.chunk(block) for block in blocks):
        if on_block:
            on_block(chunked)
        yield chunked, encode(backend, chunked.ids, config, dim)
