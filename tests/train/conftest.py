"""Helpers for training tests: a small token dataset, configs, and running a run to its end."""

import csv
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from shipyard.loader import TokenDatasetWriter
from shipyard.train import Controller, RunTable, TrainConfig, create_run

VOCAB = 128


@pytest.fixture(scope="session")
def token_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tokens") / "data"
    rng = np.random.default_rng(7)
    with TokenDatasetWriter(root, VOCAB, shard_tokens=20_000) as writer:
        for _ in range(300):
            writer.add(rng.integers(0, VOCAB, size=int(rng.integers(10, 120))))
    return root


def make_config(data: Path, alias: str = "", **sections: dict[str, Any]) -> TrainConfig:
    """A small, fast config; `sections` override fields per section (e.g. train={...})."""
    raw: dict[str, Any] = {
        "data": {"path": str(data), "global_batch": 8},
        "model": {"vocab_size": VOCAB, "d_model": 64, "n_layers": 2, "n_heads": 2, "seq_len": 64},
        "train": {"steps": 40, "checkpoint_every": 10, "gc_every": 20},
        "controller": {
            "heartbeat_s": 0.1,
            "hang_factor": 10.0,
            "hang_min_s": 2.0,
            "startup_timeout_s": 90.0,
            "window_steps": 5,
            "straggler_windows": 3,
            # 1.5× slower against noise of a shared 2-core machine: 1.1 would see scheduling.
            "straggler_factor": 1.3,
        },
        "alias": alias,
    }
    for name, fields in sections.items():
        raw[name] = {**raw.get(name, {}), **fields}
    return TrainConfig.from_dict(raw)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One `$SHIPYARD_HOME` shared by a module's runs (so they can be compared)."""
    with pytest.MonkeyPatch.context() as patch:
        root = tmp_path_factory.mktemp("home")
        patch.setenv("SHIPYARD_HOME", str(root))
        patch.delenv("SHIPYARD_STORE", raising=False)
        patch.delenv("SHIPYARD_CATALOG", raising=False)
        yield root


def train(cfg: TrainConfig, nprocs: int = 2) -> tuple[str, str]:
    """Run a run to its end with a controller in this process; returns (run id, final state)."""
    run_id = create_run(cfg, nprocs)
    return run_id, Controller(run_id, say=print).run_to_end()


def events(run_id: str, kind: str) -> list[dict[str, Any]]:
    table = RunTable()
    try:
        return [e.detail for e in table.events(run_id, kind)]
    finally:
        table.close()


def run_dir(run_id: str) -> Path:
    table = RunTable()
    try:
        return Path(table.get(run_id).run_dir)
    finally:
        table.close()


def final_losses(run_id: str) -> dict[int, str]:
    """Rank 0's loss (float.hex) per step, from the attempt that last ran each step."""
    losses: dict[int, str] = {}
    with open(run_dir(run_id) / "steps.csv") as rows:
        for row in csv.DictReader(rows):
            if row["rank"] == "0":
                losses[int(row["step"])] = row["loss"]
    return losses
