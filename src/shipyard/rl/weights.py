"""Weight sync: each trainer version is published once, workers load the version they are sent.

`shm`: a safetensors file per version in a directory under /dev/shm (memory on this host),
written to a temporary name and renamed. `artifact`: each version is a `checkpoint` artifact in
the workspace (`Workspace.put`, metadata {"version": N}), so a remote worker could `get` it.
A push returns the reference a worker needs; the time to publish is measured here, the time to
load by the worker, which reports both with the version it now serves.
"""

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from shipyard.rl.policy import load_weights, save_weights

KEEP = 32  # versions kept in shm: a queued dispatch may still name an older one


def _shm_root() -> Path:
    shm = Path("/dev/shm")
    return shm if shm.is_dir() else Path(tempfile.gettempdir())


@dataclass
class Publisher:
    mode: str
    name: str
    push_s: list[float] = field(default_factory=list)
    refs: dict[int, str] = field(default_factory=dict)
    _dir: Path | None = None

    def __post_init__(self) -> None:
        root = _shm_root()
        _remove_orphans(root)
        prefix = f"shipyard-rl-{os.getpid()}-"
        self._dir = Path(tempfile.mkdtemp(prefix=prefix, dir=root))

    def push(self, model: torch.nn.Module, version: int) -> str:
        start = time.perf_counter()
        assert self._dir is not None
        path = self._dir / f"policy-v{version}.safetensors"
        save_weights(model, path)
        ref = str(path)
        if self.mode == "artifact":
            from shipyard.workspace import Workspace

            folder = self._dir / f"v{version}"
            folder.mkdir()
            path.replace(folder / "policy.safetensors")
            workspace = Workspace.open()
            try:
                record = workspace.put(
                    folder,
                    "checkpoint",
                    metadata={"format": "shipyard-rl-policy", "version": version},
                )
            finally:
                workspace.close()
            shutil.rmtree(folder)
            ref = f"artifact:{record.id}"
        self.refs[version] = ref
        for old in [v for v in self.refs if v <= version - KEEP]:
            Path(self.refs.pop(old)).unlink(missing_ok=True)
        self.push_s.append(time.perf_counter() - start)
        return ref

    def close(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)


def _remove_orphans(root: Path) -> None:
    """Versions left in memory by a controller that was killed: its pid is gone."""
    for folder in root.glob("shipyard-rl-*-*"):
        pid = folder.name.split("-")[2]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(folder, ignore_errors=True)


def load(model: torch.nn.Module, ref: str) -> None:
    """Load a pushed version into `model` (a worker's side of the sync)."""
    if not ref.startswith("artifact:"):
        load_weights(model, Path(ref))
        return
    from shipyard.workspace import Workspace

    with tempfile.TemporaryDirectory(prefix="shipyard-rl-pull-") as folder:
        workspace = Workspace.open()
        try:
            workspace.get(ref.removeprefix("artifact:"), Path(folder) / "v")
        finally:
            workspace.close()
        load_weights(model, Path(folder) / "v" / "policy.safetensors")
