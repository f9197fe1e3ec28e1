"""The training part of `shipyard demo`: a short run over the demo's tokens, through one failure.

Trains the small GPT on the demo's token dataset (or, when the crawl stage was skipped, a
synthetic one stored as an artifact), kills a rank once mid-run, lets the controller restart it
from the last checkpoint, and registers the result as a model artifact under `DEMO_TRAINED`.
"""

import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from shipyard.errors import ShipyardError
from shipyard.loader import TokenDataset, TokenDatasetWriter
from shipyard.train.config import TrainConfig
from shipyard.train.report import status
from shipyard.train.runs import create_run
from shipyard.train.state import RunTable
from shipyard.workspace import Workspace

DEMO_TRAINED = "demo-trained"
DEMO_TUNED = "demo-tuned"
_SYNTHETIC_VOCAB = 256


def _synthetic_tokens(ws: Workspace, seed: int) -> str:
    with tempfile.TemporaryDirectory(prefix="shipyard-demo-tokens-") as tmp:
        rng = np.random.default_rng(seed)
        with TokenDatasetWriter(Path(tmp), _SYNTHETIC_VOCAB, shard_tokens=1 << 14) as writer:
            for _ in range(200):
                writer.add(rng.integers(0, _SYNTHETIC_VOCAB, size=int(rng.integers(20, 200))))
        return ws.put(Path(tmp), "dataset", name="demo-tokens-synthetic").id


def demo_config(ws: Workspace, token_ids: list[str], seed: int = 0) -> TrainConfig:
    """The small GPT on the demo's tokens (synthetic ones without): 2 ranks, 30 steps, a
    checkpoint every 10, rank 1 killed at step 15."""
    tokens = token_ids[0] if token_ids else _synthetic_tokens(ws, seed)
    with tempfile.TemporaryDirectory(prefix="shipyard-demo-peek-") as tmp:
        ws.get(tokens, Path(tmp) / "tokens")
        vocab = TokenDataset(Path(tmp) / "tokens").vocab_size
    return TrainConfig.from_dict(
        {
            "data": {"artifact": tokens, "global_batch": 8, "seed": seed},
            "model": {"vocab_size": vocab, "d_model": 64, "n_layers": 2, "n_heads": 2},
            "train": {"steps": 30, "checkpoint_every": 10, "seed": seed},
            "chaos": {"faults": [{"kind": "kill", "rank": 1, "step": 15}]},
            "controller": {"spares": 1},  # one set of warm ranks takes over after the kill
            "alias": DEMO_TRAINED,
        }
    )


def finetune_config(base: str, sft: str, seed: int = 0) -> TrainConfig:
    """A short LoRA fine-tune of the HF model `base` on the SFT dataset `sft`: 2 ranks, 8
    steps of 4 sequences of 128 tokens, a checkpoint every 4, rank 1 killed at step 6."""
    return TrainConfig.from_dict(
        {
            "data": {"artifact": sft, "global_batch": 4, "seed": seed},
            "model": {"kind": "hf", "source": base, "seq_len": 128},
            "lora": {"rank": 8, "alpha": 16.0, "targets": ["q_proj", "v_proj"]},
            "optim": {"lr": 1e-3},
            "train": {"steps": 8, "checkpoint_every": 4, "seed": seed},
            "chaos": {"faults": [{"kind": "kill", "rank": 1, "step": 6}]},
            "controller": {"spares": 1},
            "alias": DEMO_TUNED,
        }
    )


def train_demo(
    ws: Workspace, token_ids: list[str], seed: int = 0, say: Callable[[str], None] = print
) -> str:
    """Train briefly with one injected rank kill; returns the model artifact id."""
    from shipyard.train.controller import Controller  # imports torch: only when training

    cfg = demo_config(ws, token_ids, seed)
    run_id = create_run(cfg, nprocs=2)
    say(f"train     {run_id}: 2 ranks, 30 steps, rank 1 killed at step 15")
    state = Controller(run_id, say=lambda line: say(f"train     {line}")).run_to_end()
    table = RunTable()
    try:
        info = status(table.get(run_id))
    finally:
        table.close()
    if state != "succeeded":
        raise ShipyardError(f"demo training run {run_id} {state}: {info['reason']}")
    say(
        f"trained   {info['model'][:16]} after {info['failures']} failure(s), "
        f"goodput {info['goodput']:.0%}; alias {DEMO_TRAINED} → {info['model'][:16]}"
    )
    return str(info["model"])
