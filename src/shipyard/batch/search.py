"""A loaded index that answers queries: the faiss index, its rows, and the encoder of its model
version (loaded once per version and shared between indexes of the same model)."""

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import pyarrow.parquet as pq

from shipyard.batch.config import EncodeConfig
from shipyard.batch.encoder import encode
from shipyard.batch.index import INDEX_FILE, ROWS_FILE
from shipyard.batch.models import LoadedModel, cached, load
from shipyard.errors import InvalidInput, StorageError
from shipyard.workspace import Workspace

MAX_K = 100
MAX_QUERY_CHARS = 4000


@dataclass
class LoadedIndex:
    artifact: str
    model: LoadedModel
    index: Any
    doc_ids: list[str]
    chunk_ids: list[int]
    metadata: dict[str, Any] = field(default_factory=dict)

    def embed(self, text: str) -> np.ndarray:
        if not text.strip() or len(text) > MAX_QUERY_CHARS:
            raise InvalidInput(f"q must be 1-{MAX_QUERY_CHARS} characters of text")
        ids = self.model.tokenizer.encode(text).ids
        if len(ids) > self.model.window:
            raise InvalidInput(
                f"q is {len(ids)} tokens, over the model's window of {self.model.window}: "
                "shorten it (queries are never silently truncated)"
            )
        return encode(self.model.backend, [ids], EncodeConfig(), self.model.dim)

    def search(self, vector: np.ndarray, k: int) -> list[dict[str, Any]]:
        if not 1 <= k <= MAX_K:
            raise InvalidInput(f"k must be from 1 to {MAX_K}, not {k}")
        scores, rows = self.index.search(vector, min(k, len(self.doc_ids)))
        return [
            {"doc_id": self.doc_ids[r], "chunk_id": self.chunk_ids[r], "score": float(s)}
            for s, r in zip(scores[0].tolist(), rows[0].tolist(), strict=True)
            if r >= 0
        ]


class Loader:
    """Loads indexes at low CPU priority, off the query path, reusing encoders by version."""

    def __init__(self) -> None:
        faiss.omp_set_num_threads(1)  # a query is one vector: threads would only contend
        self._models: dict[str, LoadedModel] = {}
        self._lock = threading.Lock()

    def load(self, ws: Workspace, ref: str) -> LoadedIndex:
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                # Niceness is per thread on Linux: queries keep the CPU while this one loads.
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
                box["value"] = self._load(ws, ref)
            except BaseException as exc:  # raised on the caller's thread
                box["error"] = exc

        thread = threading.Thread(target=run, name="index-loader", daemon=True)
        thread.start()
        thread.join()
        if "error" in box:
            raise box["error"]
        loaded: LoadedIndex = box["value"]
        return loaded

    def _load(self, ws: Workspace, ref: str) -> LoadedIndex:
        artifact = ws.resolve(ref)
        record = ws.catalog.get_artifact(artifact)
        if record is None or record.kind != "index":
            raise InvalidInput(f"{ref!r} is not an index artifact")
        version = str(record.metadata.get("model_version", ""))
        with self._lock:
            if version not in self._models:
                self._models[version] = load(ws, version)
            model = self._models[version]
        folder: Path = cached(ws, artifact)
        try:
            index = faiss.read_index(str(folder / INDEX_FILE))
            rows = pq.read_table(folder / ROWS_FILE)
        except (RuntimeError, OSError) as exc:
            raise StorageError(f"index {artifact[:16]}: cannot read ({str(exc)[:200]})") from None
        if index.ntotal != rows.num_rows or index.d != model.dim:
            raise StorageError(f"index {artifact[:16]}: rows or dimension do not match its model")
        loaded = LoadedIndex(
            artifact,
            model,
            index,
            rows["doc_id"].to_pylist(),
            rows["chunk_id"].to_pylist(),
            dict(record.metadata),
        )
        loaded.search(loaded.embed("warm up"), 1)  # first query pays no one-off costs
        return loaded
