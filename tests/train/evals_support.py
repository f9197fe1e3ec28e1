"""Helpers for the lifecycle tests: a tiny GPT run's data with its tokenizer, and an MC task."""

import json
from pathlib import Path
from typing import Any

import numpy as np

from shipyard.loader import TokenDatasetWriter
from shipyard.train import TrainConfig
from shipyard.workspace import Workspace

from ..evals.test_checkpoints import _byte_tokenizer

VOCAB = 320  # the byte-level tokenizer's 300 tokens fit


def gpt_data(ws: Workspace, tmp: Path) -> str:
    """A dataset artifact whose lineage holds its tokenizer, as the data pipeline makes them."""
    (tmp / "tokenizer").mkdir()
    tokenizer = ws.put(_byte_tokenizer(tmp / "tokenizer" / "tokenizer.json").parent, "tokenizer")
    rng = np.random.default_rng(3)
    with TokenDatasetWriter(tmp / "tokens", 300, shard_tokens=10_000) as writer:
        for _ in range(100):
            writer.add(rng.integers(0, 300, size=int(rng.integers(10, 80))))
    return ws.put(tmp / "tokens", "dataset", inputs=[tokenizer.id]).id


def mc_task(path: Path, answers: list[int] | None = None, n: int = 12) -> str:
    """An n-item two-choice task file; returns its ref."""
    lines = [{"task": {"name": path.stem, "kind": "mc", "template": "{question} is"}}]
    for i in range(n):
        answer = answers[i] if answers else i % 2
        lines.append({"id": f"q{i}", "question": f"{i} + {i}", "choices": ["odd", "even"],
                      "answer": answer})  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return f"jsonl:{path}"


def gpt_config(data: str, **sections: dict[str, Any]) -> TrainConfig:
    raw: dict[str, Any] = {
        "data": {"artifact": data, "global_batch": 4},
        "model": {"vocab_size": VOCAB, "d_model": 32, "n_layers": 2, "n_heads": 2, "seq_len": 64},
        "train": {"steps": 20, "checkpoint_every": 10, "gc_every": 0},
        "controller": {"spares": 0, "hang_min_s": 30.0, "startup_timeout_s": 120.0},
    }
    for name, fields in sections.items():
        raw[name] = {**raw.get(name, {}), **fields}
    return TrainConfig.from_dict(raw)
