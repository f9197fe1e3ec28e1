"""LoRA adapters over one base: store → disk → slot, mixed batches, exact outputs, unknown names."""

from pathlib import Path
from typing import Any

import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from tests.serve.conftest import collect, reference_greedy
from transformers import AutoModelForCausalLM, AutoTokenizer

from shipyard.errors import NotFound
from shipyard.serve.engine import AdapterSet, Done, Engine, EngineConfig, GenRequest
from shipyard.serve.models import ADAPTER_KIND, materialise, put_adapter_dir
from shipyard.workspace import Workspace

NEW = 8


def base(tiny_model_dir: Path) -> Any:
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    model.train(False)
    return model


def make_adapter(tiny_model_dir: Path, dest: Path, seed: int) -> Path:
    """A LoRA on every attention projection with random (not zero) B, so it changes outputs."""
    torch.manual_seed(seed)
    config = LoraConfig(
        r=4,
        lora_alpha=16,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
        init_lora_weights=False,
    )
    get_peft_model(base(tiny_model_dir), config).save_pretrained(dest)
    return dest


@pytest.fixture(scope="module")
def adapter_dirs(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("adapters")
    return {n: make_adapter(tiny_model_dir, root / n, seed) for n, seed in (("a1", 1), ("a2", 2))}


def fetcher(ref: str, cache: Path) -> Any:
    def fetch() -> tuple[Path, bool]:
        ws = Workspace.open()  # the fetch runs on a thread of its own: its own connection
        try:
            got = materialise(ws, ref, cache, kind=ADAPTER_KIND)
            return got.path, got.fetched
        finally:
            ws.close()

    return fetch


@pytest.mark.parametrize("slots", [2, 1])
def test_adapters_mix_in_one_batch_and_match_peft_alone(
    slots: int,
    workspace: Workspace,
    tiny_model_dir: Path,
    adapter_dirs: dict[str, Path],
    tmp_path: Path,
) -> None:
    torch.set_num_threads(1)
    for name, path in adapter_dirs.items():
        put_adapter_dir(workspace, path, f"lora-{name}")
    fetchers = {n: fetcher(f"lora-{n}", tmp_path / "cache") for n in adapter_dirs}
    loads: list[tuple[str, str]] = []
    adapters = AdapterSet(
        base(tiny_model_dir),
        fetchers,
        max_loaded=slots,
        on_load=lambda name, source: loads.append((name, source)),
    )
    engine = Engine(adapters.model, EngineConfig(block_size=4), adapters=adapters).start()
    ids = AutoTokenizer.from_pretrained(tiny_model_dir)("Ship the cargo north today")["input_ids"]
    try:
        with pytest.raises(NotFound, match="a3"):
            engine.submit(GenRequest(ids, NEW, adapter="a3"))
        requests = {
            name: engine.submit(GenRequest(ids, NEW, adapter=name)) for name in ("a1", None, "a2")
        }
        got = {name: collect(r) for name, r in requests.items()}
    finally:
        engine.stop()

    assert got[None][0] == reference_greedy(base(tiny_model_dir), ids, NEW)
    for name, path in adapter_dirs.items():
        alone = PeftModel.from_pretrained(base(tiny_model_dir), str(path))
        alone.train(False)
        tokens, done = got[name]
        assert isinstance(done, Done)
        assert tokens == reference_greedy(alone, ids, NEW), name
    assert got["a1"][0] != got[None][0]  # the adapter really changed the model
    # Each loaded once, from the store (with one slot, one after the other).
    assert sorted(loads) == [("a1", "store"), ("a2", "store")]
    assert len(adapters.loaded) <= slots
