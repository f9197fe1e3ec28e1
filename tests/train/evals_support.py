"""Helpers for the lifecycle tests: a tiny GPT run's data with its tokenizer, and an MC task."""

import json
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from shipyard.evals.runner import queue_name
from shipyard.evals.scoring import score
from shipyard.evals.store import ResultStore, judge_version
from shipyard.evals.tasks import get_task
from shipyard.loader import TokenDatasetWriter
from shipyard.queue import Queue
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


def answer_all(queue: Queue, model: str, ref: str, right: bool) -> None:
    """Work the model's planned queue as an eval worker would, with every item answered right
    (or every one wrong), without running a model."""
    task = get_task(ref)
    items = {i.id: i for i in task.load()}
    for q in queue.claim(queue_name(model), n=100, lease=60):
        item = items[q.payload["item"]]
        target = int(item.target)
        logprobs = [0.0] * len(item.choices)
        logprobs[(target + 1) % len(item.choices) if right else target] = -5.0
        output: dict[str, Any] = {"logprobs": logprobs, "greedy": [False] * len(item.choices)}
        result = score(task, item, output)
        row = (q.payload["run"], judge_version(task), item.id, None, output, result)
        effect = partial(_record, row)
        queue.complete(q.id, q.token, {"outcome": result.outcome}, effect=effect)


def _record(row: tuple[Any, ...], db: Any) -> None:
    ResultStore.record(db, *row)
