"""Model artifacts: a Hugging Face `save_pretrained` directory stored as kind "model".

`put_model_dir` stores such a directory under an alias; `materialise` brings one back into a local
cache (`<cache>/<artifact id>/`, reused when already complete) for the engine to load. Importers
that make these directories from other formats live in `model_import.py`.
"""

import json
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shipyard.catalog import ArtifactRecord
from shipyard.errors import InvalidInput
from shipyard.trust.audit import Reader
from shipyard.trust.gate import Read, admit
from shipyard.workspace import Workspace

MODEL_KIND = "model"
ADAPTER_KIND = "adapter"
_COMPLETE = ".shipyard-complete"  # written last: a directory without it is a torn copy


def put_model_dir(
    ws: Workspace,
    directory: Path,
    name: str | None,
    *,
    source: str,
    inputs: tuple[str, ...] = (),
    extra: dict[str, Any] | None = None,
) -> ArtifactRecord:
    """Store an HF model directory as a model artifact, metadata naming its architecture."""
    config = _read_config(directory)
    architectures = config.get("architectures") or [config.get("model_type", "unknown")]
    metadata = {"format": "hf", "architecture": str(architectures[0]), "source": source}
    metadata.update(extra or {})
    return ws.put(directory, MODEL_KIND, name=name, inputs=inputs, metadata=metadata)


def put_adapter_dir(
    ws: Workspace, directory: Path, name: str | None, *, base: str | None = None
) -> ArtifactRecord:
    """Store a peft `save_pretrained` adapter directory as an adapter artifact; `base` (a ref to
    the model it adapts) is recorded as its input and in its metadata."""
    if not (directory / "adapter_config.json").is_file():
        raise InvalidInput(f"{directory}: no adapter_config.json (is it a peft adapter?)")
    base_id = ws.resolve(base) if base else ""
    metadata = {"format": "peft", "base": base_id}
    inputs = (base_id,) if base_id else ()
    return ws.put(directory, ADAPTER_KIND, name=name, inputs=inputs, metadata=metadata)


@dataclass(frozen=True)
class Materialised:
    artifact_id: str
    path: Path
    seconds: float  # 0 when the cache already held it
    fetched: bool


def materialise(
    ws: Workspace, ref: str, cache: Path, kind: str = MODEL_KIND, reader: Reader | None = None
) -> Materialised:
    """The artifact's files under `cache/<id>`, fetched and verified unless already there. The
    trust policy is asked, and the read audited, every time, cached or not."""
    artifact_id = ws.resolve(ref)
    manifest = admit(ws, Read(artifact_id, ref, "serve", reader or Reader()))
    if manifest.kind != kind:
        raise InvalidInput(f"{ref!r} is a {manifest.kind!r} artifact, not a {kind!r}")
    dest = cache / artifact_id
    if (dest / _COMPLETE).is_file():
        return Materialised(artifact_id, dest, 0.0, False)
    started = time.monotonic()
    cache.mkdir(parents=True, exist_ok=True)
    # Replicas on one host share the cache: each writes its own copy, the first rename wins.
    partial = Path(tempfile.mkdtemp(prefix=f".{artifact_id[:16]}.", dir=cache))
    try:
        ws.get(artifact_id, partial)
        (partial / _COMPLETE).write_text(artifact_id + "\n")
        try:
            partial.rename(dest)
        except OSError:
            if not (dest / _COMPLETE).is_file():
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return Materialised(artifact_id, dest, time.monotonic() - started, True)


def _read_config(directory: Path) -> dict[str, Any]:
    path = directory / "config.json"
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError:
        raise InvalidInput(
            f"{directory}: no config.json (not a save_pretrained directory)"
        ) from None
    except ValueError as exc:
        raise InvalidInput(f"{path}: not JSON ({exc})") from None
    if not isinstance(config, dict):
        raise InvalidInput(f"{path}: expected a JSON object")
    return config
