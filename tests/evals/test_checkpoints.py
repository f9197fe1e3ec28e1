"""A trainer checkpoint commit (and an alias of checkpoints) triggers evaluation of its model."""

from pathlib import Path

import torch

from shipyard.checkpoint import CheckpointManager, Publish
from shipyard.evals import TriggerPolicy, watch
from shipyard.evals.triggers import on_checkpoint_commit
from shipyard.queue import Queue
from shipyard.train.config import ModelConfig
from shipyard.train.model import GPT
from shipyard.workspace import Workspace


def _byte_tokenizer(dest: Path) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(["What is 12 + 30? Answer: 42"] * 20, trainer)
    tok.save(str(dest))
    return dest


def test_checkpoint_commits_are_imported_and_triggered_once(
    queue: Queue, workspace: Workspace, tmp_path: Path
) -> None:
    tokenizer = _byte_tokenizer(tmp_path / "tokenizer.json")
    manager = CheckpointManager(
        tmp_path / "ckpt", peer_memory=False, publish_to=Publish(alias="run-ckpt")
    )
    config = ModelConfig(vocab_size=320, d_model=32, n_layers=2, n_heads=4, seq_len=64)
    torch.manual_seed(0)
    for step in (10, 20):
        manager.save(step, {"model": GPT(config).state_dict(), "optim": {}})
    manager.close()
    policy = TriggerPolicy(fast=("rg-basic-arithmetic",), full=("rg-leg-counting",), full_every=2)
    said: list[str] = []
    passes = iter([False, False, True])
    stop = lambda: next(passes)  # noqa: E731
    watch(workspace, queue, "run-ckpt", policy, 0.0, stop, said.append, tokenizer, n_heads=4)
    assert len(said) == 3  # first checkpoint: fast tier; second: fast and full
    models = workspace.catalog.list_artifacts("model")
    assert len(models) == 2
    for model in models:  # each model's lineage leads back to its checkpoint
        parents = {e.parent for e in workspace.catalog.lineage(model.id, "up")}
        kinds = {r.kind for r in map(workspace.catalog.get_artifact, parents) if r is not None}
        assert "checkpoint" in kinds
    # the trainer's own commit hook, for a checkpoint already triggered, does nothing
    latest = workspace.resolve("run-ckpt")
    assert on_checkpoint_commit(queue, workspace, policy, latest, tokenizer, "alias:run-ckpt") == []
