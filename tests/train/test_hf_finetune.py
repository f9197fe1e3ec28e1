"""Fine-tuning a Hugging Face model: LoRA under DDP with a loss mask, killed and resumed to the
same losses, and its checkpoint imported into serving with the trained model's logits."""

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from shipyard.checkpoint import latest_committed, load_committed
from shipyard.checkpoint.publish import Publish, publish
from shipyard.loader import LOSS_MASK_DIR, TokenDatasetWriter
from shipyard.serve.model_import import import_trainer_model
from shipyard.serve.models import put_model_dir
from shipyard.train.config import TrainConfig
from shipyard.workspace import Workspace

from .conftest import VOCAB, events, final_losses, make_config, run_dir, train


@pytest.fixture(scope="module")
def sft_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Token documents whose first part is a prompt (mask 0) and the rest a response (mask 1)."""
    root = tmp_path_factory.mktemp("sft") / "data"
    rng = np.random.default_rng(3)
    with (
        TokenDatasetWriter(root, VOCAB) as tokens,
        TokenDatasetWriter(root / LOSS_MASK_DIR, 2) as mask,
    ):
        for _ in range(200):
            length = int(rng.integers(10, 60))
            prompt = int(rng.integers(1, length))
            tokens.add(rng.integers(0, VOCAB, length))
            mask.add((np.arange(length) >= prompt).astype(np.int64))
    return root


@pytest.fixture(scope="module")
def artifacts(home: Path, sft_data: Path, tiny_llama_dirs: Callable[[int], Path]) -> Path:
    """The data and the base model as artifacts, `sft` and `tiny-base`: what lineage names."""
    ws = Workspace.open()
    try:
        ws.put(sft_data, "dataset", name="sft")
        put_model_dir(ws, tiny_llama_dirs(0), "tiny-base", source="test")
    finally:
        ws.close()
    return home


def lora_config(**chaos: object) -> TrainConfig:
    raw = make_config(
        Path("unused"),
        model={"kind": "hf", "source": "tiny-base", "seq_len": 32},
        lora={"rank": 4, "alpha": 8.0, "targets": ["q_proj", "v_proj"]},
        optim={"lr": 1e-2},
        train={"steps": 8, "checkpoint_every": 4},
        chaos=chaos,
    ).to_dict()
    raw["data"] = {"artifact": "sft", "global_batch": 8}
    return TrainConfig.from_dict(raw)


@pytest.fixture(scope="module")
def baseline(artifacts: Path) -> str:
    run_id, state = train(lora_config())
    assert state == "succeeded"
    return run_id


def test_lora_kill_and_resume_gives_the_uninterrupted_losses(baseline: str) -> None:
    kill = {"faults": [{"kind": "kill", "rank": 1, "step": 6, "attempt": 0}]}
    run_id, state = train(lora_config(**kill))
    assert state == "succeeded"
    assert events(run_id, "failure"), "the kill happened"
    losses = final_losses(run_id)
    assert sorted(losses) == list(range(1, 9))
    assert losses == final_losses(baseline)
    first, last = float.fromhex(losses[1]), float.fromhex(losses[8])
    assert last < first  # the adapters learned something


def test_lora_checkpoints_keep_only_the_adapters(baseline: str) -> None:
    found = latest_committed(run_dir(baseline) / "checkpoints")
    assert found is not None and found.manifest.step == 8
    state = load_committed(found).state
    assert state["model"] and all("lora_" in name for name in state["model"])
    assert state["hf"]["lora"]["rank"] == 4


def test_checkpoint_imports_with_the_trained_logits_and_lineage(
    baseline: str, tiny_llama_dirs: Callable[[int], Path]
) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    found = latest_committed(run_dir(baseline) / "checkpoints")
    assert found is not None
    checkpoint = publish(found, Publish(run_id=baseline))  # as the run publishes its checkpoints
    ws = Workspace.open()
    try:
        record = import_trainer_model(ws, checkpoint, "tuned", None)
        edges = ws.catalog.lineage(record.id, "up")
        imported = run_dir(baseline) / "imported"
        ws.get(record.id, imported)
        # model ← (import) ← checkpoint ← (the training run) ← training data + base model
        near = {e.parent for e in edges if e.depth <= 2}
        far = {e.parent for e in edges if e.depth in (3, 4)}
        assert checkpoint in near
        assert {baseline, ws.resolve("sft"), ws.resolve("tiny-base")} <= far
    finally:
        ws.close()
    tokens = torch.randint(0, VOCAB, (2, 20), generator=torch.Generator().manual_seed(5))
    logits = {}
    for name, path in {
        "imported": imported,
        "final": run_dir(baseline) / "model",  # the run's own export of its live model
        "base": tiny_llama_dirs(0),
    }.items():
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        with torch.no_grad():
            logits[name] = model(input_ids=tokens).logits
    assert torch.allclose(logits["imported"], logits["final"], atol=1e-5)
    assert not torch.allclose(logits["imported"], logits["base"], atol=1e-3)
    base_tok = AutoTokenizer.from_pretrained(tiny_llama_dirs(0))
    tok = AutoTokenizer.from_pretrained(imported)
    assert tok.chat_template == base_tok.chat_template and tok.get_vocab() == base_tok.get_vocab()
    assert json.loads((imported / "config.json").read_text())["architectures"] == [
        "LlamaForCausalLM"
    ]
