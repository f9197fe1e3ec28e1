"""Creating a training run in the catalog, and registering what it produced."""

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from shipyard.errors import InvalidInput
from shipyard.hashing import canonical_json
from shipyard.loader import TokenDataset, open_loss_mask
from shipyard.provenance import code_version, current_user
from shipyard.store import put_tree
from shipyard.train.config import TrainConfig
from shipyard.train.state import RunTable, TrainRun
from shipyard.workspace import Workspace, shipyard_home


def create_run(cfg: TrainConfig, nprocs: int, home: Path | None = None) -> str:
    """Record a `pending` run (catalog run + our row), with its dataset and base model as inputs;
    returns its id. Everything a rank would trip over is refused here, before anything starts.

    For `model.kind = "hf"` the recorded config names the base model exactly (its artifact id,
    or its absolute directory), and `<run dir>/base` links to its directory."""
    if nprocs < 1:
        raise InvalidInput(f"--nprocs must be >= 1, got {nprocs}")
    if cfg.data.global_batch < nprocs:
        raise InvalidInput(
            f"train config field 'data.global_batch' ({cfg.data.global_batch}) must be at least "
            f"the number of ranks ({nprocs})"
        )
    root = home or shipyard_home()
    ws = Workspace.open(home)
    try:
        data_id = ws.resolve(cfg.data.artifact) if cfg.data.artifact else ""
        base_dir, base_id, vocab = None, "", cfg.model.vocab_size
        if cfg.model.kind == "hf":
            cfg, base_dir, base_id, vocab = _check_hf_model(ws, cfg, root)
        if not data_id:
            _check_dataset(Path(cfg.data.path), vocab, cfg)
        run_id = ws.catalog.start_run(
            "train",
            {"config": cfg.to_dict(), "world_size": nprocs},
            code_version(),
            current_user(),
            [i for i in (data_id, base_id) if i],
        )
        run_dir = root / "train" / run_id
        data_path = Path(cfg.data.path).resolve() if cfg.data.path else run_dir / "data"
        if data_id:
            ws.get(data_id, data_path)
            _check_dataset(data_path, vocab, cfg)
        run_dir.mkdir(parents=True, exist_ok=True)
        if base_dir is not None:
            from shipyard.train.hf_model import BASE_LINK

            (run_dir / BASE_LINK).symlink_to(base_dir, target_is_directory=True)
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


def _check_hf_model(
    ws: Workspace, cfg: TrainConfig, root: Path
) -> tuple[TrainConfig, Path, str, int]:
    """The base model's directory, artifact id and vocabulary, checked; `cfg` naming it exactly."""
    from shipyard.train.hf_model import check_model_dir, source_dir

    base_dir, base_id = source_dir(ws, cfg.model.source, root / "cache" / "models")
    config = check_model_dir(base_dir, cfg.lora)
    positions = getattr(config, "max_position_embeddings", None)
    if isinstance(positions, int) and cfg.model.seq_len > positions:
        raise InvalidInput(
            f"train config field 'model.seq_len' ({cfg.model.seq_len}) is more than the model's "
            f"max_position_embeddings ({positions})"
        )
    exact = replace(cfg.model, source=base_id or str(base_dir))
    return replace(cfg, model=exact), base_dir, base_id, int(config.vocab_size)


def _check_dataset(path: Path, vocab_size: int, cfg: TrainConfig) -> None:
    dataset = TokenDataset(path)  # raises NotFound naming the directory
    if dataset.vocab_size > vocab_size:
        model = (
            f"model {cfg.model.source}'s vocab_size"
            if cfg.model.kind == "hf"
            else "train config field 'model.vocab_size'"
        )
        raise InvalidInput(
            f"dataset {path} has vocab_size {dataset.vocab_size}, more than {model} ({vocab_size})"
        )
    open_loss_mask(dataset)  # refuses a mask that does not fit the tokens


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
        out = Path(run.run_dir) / "model"
        if cfg.model.kind == "hf":  # an HF directory, LoRA merged: servable as it is
            architectures = json.loads((out / "config.json").read_text()).get("architectures")
            meta.update(format="hf", architecture=str((architectures or ["?"])[0]))
            meta["base"] = cfg.model.source
        manifest = put_tree(ws.pieces, out, "model", metadata=meta)
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
