"""Model import: the trainer's GPT (checkpoint artifact or export) becomes a servable HF model."""

import argparse
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from tests.serve.conftest import collect, reference_greedy
from transformers import AutoModelForCausalLM

from shipyard.checkpoint import CheckpointManager, Publish
from shipyard.cli import model as model_cli
from shipyard.errors import InvalidInput
from shipyard.serve.engine import Done, Engine, EngineConfig, GenRequest
from shipyard.serve.model_import import import_trainer_model
from shipyard.serve.models import materialise
from shipyard.train.config import ModelConfig
from shipyard.train.model import GPT
from shipyard.workspace import Workspace

CFG = ModelConfig(vocab_size=320, d_model=32, n_layers=2, n_heads=4, seq_len=64)


def byte_tokenizer(dest: Path) -> Path:
    """A byte-level BPE like the data pipeline's, saved as tokenizer.json."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(["the ship sails at dawn", "cargo in the hold"] * 20, trainer)
    dest.mkdir(parents=True, exist_ok=True)
    tok.save(str(dest / "tokenizer.json"))
    return dest / "tokenizer.json"


def gpt(seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    model = GPT(CFG)
    model.train(False)
    return model


def cli(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    model_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(list(argv))
    result: int = args.func(args)
    return result


def test_checkpoint_artifact_imports_as_gpt2_with_equal_logits_and_serves(
    workspace: Workspace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = gpt()
    manager = CheckpointManager(
        tmp_path / "ckpt", peer_memory=False, publish_to=Publish(alias="run-ckpt")
    )
    manager.save(7, {"model": source.state_dict(), "optim": {}})
    manager.close()
    tokenizer = byte_tokenizer(tmp_path / "tok")

    assert (
        cli(
            "model",
            "import",
            "checkpoint",
            "run-ckpt",
            "--tokenizer",
            str(tokenizer),
            "--n-heads",
            "4",
            "--name",
            "small",
        )
        == 0
    )
    model_id = capsys.readouterr().out.strip()
    assert workspace.resolve("small") == model_id
    record = workspace.catalog.get_artifact(model_id)
    assert record is not None and record.metadata["architecture"] == "GPT2LMHeadModel"
    assert cli("model", "ls") == 0
    listed = capsys.readouterr().out
    assert model_id[:16] in listed and "small" in listed and "GPT2LMHeadModel" in listed

    got = materialise(workspace, "small", tmp_path / "cache")
    hf = AutoModelForCausalLM.from_pretrained(got.path, dtype=torch.float32)
    hf.train(False)
    tokens = torch.randint(0, CFG.vocab_size, (2, 20), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(
            hf(input_ids=tokens).logits, source(tokens), atol=1e-4, rtol=1e-4
        )

    # The engine serves it (GPT-2 layout: learned positions) exactly as generate does.
    engine = Engine(hf, EngineConfig(block_size=4)).start()
    try:
        ids = tokens[0, :9].tolist()
        got_tokens, done = collect(engine.submit(GenRequest(ids, 8)))
    finally:
        engine.stop()
    assert isinstance(done, Done)
    assert got_tokens == reference_greedy(hf, ids, 8)


def test_export_dir_needs_no_heads_and_missing_heads_are_named(
    workspace: Workspace, tmp_path: Path
) -> None:
    tokenizer = byte_tokenizer(tmp_path / "tok")
    export = tmp_path / "run" / "model"
    export.mkdir(parents=True)
    save_file(
        {k: v.contiguous() for k, v in gpt().state_dict().items()},
        str(export / "model.safetensors"),
    )
    weights_only = tmp_path / "weights"
    weights_only.mkdir()
    save_file(
        {k: v.contiguous() for k, v in gpt().state_dict().items()},
        str(weights_only / "model.safetensors"),
    )
    with pytest.raises(InvalidInput, match="n_heads"):
        import_trainer_model(workspace, str(weights_only), "x", tokenizer)
    (export / "config.json").write_text(json.dumps({"n_heads": 4, "d_model": 32}))
    record = import_trainer_model(workspace, str(export), "from-export", tokenizer)
    assert workspace.resolve("from-export") == record.id
    with pytest.raises(InvalidInput, match="n_heads"):
        import_trainer_model(workspace, str(export), "y", tokenizer, n_heads=5)
