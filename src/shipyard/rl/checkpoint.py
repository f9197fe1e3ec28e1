"""The trainer's checkpoint: weights, optimizer, version and the whole buffer, as one artifact.

Saved as a `checkpoint` artifact (`Workspace.put`) named `<run name>-rl-checkpoint`; the buffer
goes in with every trajectory's per-token versions and log-probs, so a resumed trainer sees the
same staleness and applies the same correction as the one that stopped. Dispatches and reward
requests in flight are not saved: on resume their trajectories are handed out or scored again.
"""

import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from shipyard.errors import InvalidInput, NotFound
from shipyard.rl.buffer import Buffer
from shipyard.rl.policy import load_weights, save_weights

if TYPE_CHECKING:
    from shipyard.rl.controller import Controller


def alias(name: str) -> str:
    return f"{name}-rl-checkpoint"


def save(controller: "Controller") -> str:
    """Store the controller's state; the artifact id (the alias moves to it)."""
    from shipyard.workspace import Workspace

    with tempfile.TemporaryDirectory(prefix="shipyard-rl-ckpt-") as folder:
        root = Path(folder)
        save_weights(controller.model, root / "policy.safetensors")
        torch.save(controller.optimizer.state_dict(), root / "optimizer.pt")
        state = {
            "version": controller.version,
            "warmup_accuracy": controller.warmup_accuracy,
            "buffer": controller.buffer.to_json(),
        }
        (root / "state.json").write_text(json.dumps(state))
        workspace = Workspace.open()
        try:
            record = workspace.put(
                root,
                "checkpoint",
                name=alias(controller.cfg.name),
                metadata={"format": "shipyard-rl-trainer", "version": controller.version},
            )
        finally:
            workspace.close()
    return record.id


def restore(controller: "Controller") -> bool:
    """Load the named run's last checkpoint into `controller`; False when it has none."""
    from shipyard.workspace import Workspace

    workspace = Workspace.open()
    try:
        with tempfile.TemporaryDirectory(prefix="shipyard-rl-ckpt-") as folder:
            root = Path(folder) / "c"
            try:
                workspace.get(alias(controller.cfg.name), root)
            except NotFound:
                return False
            try:
                load_weights(controller.model, root / "policy.safetensors")
            except ValueError as exc:
                raise InvalidInput(
                    f"checkpoint {alias(controller.cfg.name)}: its weights do not fit this run's "
                    f"policy ({exc}): it was cut with another model shape or an older policy"
                ) from None
            optimizer = torch.load(root / "optimizer.pt", weights_only=True)
            controller.optimizer.load_state_dict(optimizer)
            state = json.loads((root / "state.json").read_text())
    finally:
        workspace.close()
    controller.version = int(state["version"])
    controller.warmup_accuracy = state["warmup_accuracy"]
    controller.buffer = Buffer.from_json(state["buffer"])
    return True
