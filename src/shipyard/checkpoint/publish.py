"""Register a committed checkpoint as a Shipyard artifact, with lineage to its run and data."""

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from shipyard.checkpoint.manifest import MANIFEST, Committed
from shipyard.store import put_tree
from shipyard.workspace import Workspace


@dataclass(frozen=True)
class Publish:
    """Where and how to record checkpoints as artifacts of kind `checkpoint`.

    `home`: the workspace (default `$SHIPYARD_HOME`). With `run_id`, the checkpoint is an output
    of that (training) run, whose inputs are its datasets; without, a run is recorded that
    consumes `inputs` (artifact refs, e.g. the token datasets). `alias` is moved to each new one.
    """

    home: Path | None = None
    run_id: str | None = None
    inputs: Sequence[str] = ()
    alias: str | None = None


def publish(checkpoint: Committed, how: Publish) -> str:
    """Store the checkpoint's files as an artifact; returns its id."""
    # Opened here, in the saving thread: a catalog connection belongs to one thread.
    workspace = Workspace.open(how.home)
    try:
        manifest = checkpoint.manifest
        metadata = {
            "step": manifest.step,
            "world_size": manifest.world_size,
            "config_hash": manifest.config_hash,
            "code_version": manifest.code_version,
            "manifest": MANIFEST,
        }
        if how.run_id:
            stored = put_tree(workspace.pieces, checkpoint.path, "checkpoint", metadata=metadata)
            artifact_id = workspace.register(stored, how.run_id).id
            if how.alias:
                workspace.move_alias(how.alias, artifact_id)
            return artifact_id
        record = workspace.put(
            checkpoint.path, "checkpoint", name=how.alias, inputs=how.inputs, metadata=metadata
        )
        return record.id
    finally:
        workspace.close()
