"""Creating a training run in the catalog, and registering what it produced."""

import hashlib
from pathlib import Path
from typing import Any

from shipyard.errors import InvalidInput
from shipyard.hashing import canonical_json
from shipyard.loader import TokenDataset
from shipyard.provenance import code_version, current_user
from shipyard.store import put_tree
from shipyard.train.config import TrainConfig
from shipyard.train.state import RunTable, TrainRun
from shipyard.workspace import Workspace, shipyard_home


def create_run(cfg: TrainConfig, nprocs: int, home: Path | None = None) -> str:
    """Record a `pending` run (catalog run + our row), with its dataset as input; returns its id."""
    if nprocs < 1:
        raise InvalidInput(f"--nprocs must be >= 1, got {nprocs}")
    if cfg.data.global_batch < nprocs:
        raise InvalidInput(
            f"train config field 'data.global_batch' ({cfg.data.global_batch}) must be at least "
            f"the number of ranks ({nprocs})"
        )
    ws = Workspace.open(home)
    try:
        inputs = [ws.resolve(cfg.data.artifact)] if cfg.data.artifact else []
        if not inputs:
            _check_dataset(Path(cfg.data.path), cfg)
        run_id = ws.catalog.start_run(
            "train",
            {"config": cfg.to_dict(), "world_size": nprocs},
            code_version(),
            current_user(),
            inputs,
        )
        run_dir = (home or shipyard_home()) / "train" / run_id
        data_path = Path(cfg.data.path).resolve() if cfg.data.path else run_dir / "data"
        if inputs:
            ws.get(inputs[0], data_path)
            _check_dataset(data_path, cfg)
        run_dir.mkdir(parents=True, exist_ok=True)
    finally:
        ws.close()
    table = RunTable()
    try:
        table.create(
            TrainRun(run_id, "pending", cfg.to_dict(), nprocs, str(run_dir), str(data_path), -1)
        )
        table.event(run_id, "state", state="pending")
    finally:
        table.close()
    return run_id


def _check_dataset(path: Path, cfg: TrainConfig) -> None:
    dataset = TokenDataset(path)  # raises NotFound naming the directory
    if dataset.vocab_size > cfg.model.vocab_size:
        raise InvalidInput(
            f"dataset {path} has vocab_size {dataset.vocab_size}, more than train config field "
            f"'model.vocab_size' ({cfg.model.vocab_size})"
        )


def register_model(run: TrainRun, cfg: TrainConfig, metadata: dict[str, Any]) -> str:
    """Store the final weights as a `model` artifact produced by the run; move `cfg.alias`."""
    ws = Workspace.open()
    try:
        config_hash = hashlib.sha256(canonical_json(cfg.to_dict())).hexdigest()
        meta = {
            "run": run.run_id,
            "steps": cfg.train.steps,
            "world_size": run.world_size,
            "config_hash": config_hash,
            "skip_windows": run.skips,
            **metadata,
        }
        manifest = put_tree(ws.pieces, Path(run.run_dir) / "model", "model", metadata=meta)
        record = ws.register(manifest, run.run_id)
        if cfg.alias:
            ws.move_alias(cfg.alias, record.id)
        return record.id
    finally:
        ws.close()


def finish_catalog_run(run_id: str, succeeded: bool) -> None:
    ws = Workspace.open()
    try:
        ws.catalog.finish_run(run_id, "succeeded" if succeeded else "failed")
    finally:
        ws.close()
