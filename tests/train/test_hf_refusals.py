"""A fine-tune that could not run is refused at submission, by name, before anything starts.

`shipyard train run` prints such a refusal as one line and exits 2 (test_controller_cli.py)."""

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from shipyard.errors import InvalidInput
from shipyard.loader import TokenDatasetWriter
from shipyard.train import TrainConfig, create_run


def hf_config(data: Path, source: str, targets: tuple[str, ...] = ("q_proj",)) -> TrainConfig:
    return TrainConfig.from_dict(
        {
            "data": {"path": str(data), "global_batch": 2},
            "model": {"kind": "hf", "source": source, "seq_len": 16},
            "lora": {"rank": 2, "targets": list(targets)},
        }
    )


def copy_model(model: Path, dest: Path, *skip: str) -> Path:
    dest.mkdir()
    for file in model.iterdir():
        if file.name not in skip:
            shutil.copy(file, dest / file.name)
    return dest


def refused(cfg: TrainConfig, home: Path) -> str:
    """The refusal's message; nothing was created for the run."""
    before = sorted((home / "train").glob("*")) if (home / "train").is_dir() else []
    with pytest.raises(InvalidInput) as caught:
        create_run(cfg, 2)
    after = sorted((home / "train").glob("*")) if (home / "train").is_dir() else []
    assert after == before
    assert caught.value.exit_code == 2  # the CLI's exit code for bad input
    return str(caught.value)


@pytest.fixture(scope="module")
def model(tiny_llama_dirs: Callable[[int], Path]) -> Path:
    return tiny_llama_dirs(0)


def test_an_unknown_model_is_refused(home: Path, token_data: Path) -> None:
    message = refused(hf_config(token_data, "no-such-model"), home)
    assert "'model.source'" in message and "'no-such-model' is neither" in message


def test_a_model_without_a_tokenizer_is_refused(
    home: Path, token_data: Path, model: Path, tmp_path: Path
) -> None:
    bare = copy_model(model, tmp_path / "bare", "tokenizer.json", "tokenizer_config.json")
    message = refused(hf_config(token_data, str(bare)), home)
    assert f"{bare} has no usable tokenizer" in message


def test_weights_that_do_not_fit_the_config_are_refused_by_name(
    home: Path, token_data: Path, model: Path, tmp_path: Path
) -> None:
    wider = copy_model(model, tmp_path / "wider")
    config = json.loads((wider / "config.json").read_text())
    config["intermediate_size"] = 96
    (wider / "config.json").write_text(json.dumps(config))
    message = refused(hf_config(token_data, str(wider)), home)
    assert "tensor model.layers.0.mlp.down_proj.weight has shape [32, 64]" in message
    assert "the config says [32, 96]" in message

    torn = copy_model(model, tmp_path / "torn")
    weights = torn / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    assert "model.safetensors is not a safetensors file" in refused(
        hf_config(token_data, str(torn)), home
    )


def test_a_lora_target_matching_no_module_is_refused_with_the_names(
    home: Path, token_data: Path, model: Path
) -> None:
    message = refused(hf_config(token_data, str(model), ("q_proj", "qkv")), home)
    assert "'lora.targets': 'qkv' matches no module" in message
    assert "q_proj" in message and "down_proj" in message


def test_data_with_a_larger_vocabulary_than_the_model_is_refused(
    home: Path, model: Path, tmp_path: Path
) -> None:
    data = tmp_path / "wide"
    with TokenDatasetWriter(data, 60_000) as writer:
        writer.add(np.arange(100) + 50_000)
    message = refused(hf_config(data, str(model)), home)
    assert f"dataset {data} has vocab_size 60000, more than model" in message
    assert "vocab_size (49152)" in message
