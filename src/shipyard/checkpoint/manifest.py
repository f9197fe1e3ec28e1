"""The checkpoint manifest and the commit rule: a checkpoint exists once its manifest does.

Layout: `<root>/step-<10 digits>/shard-<rank>-of-<world>.safetensors` and `manifest.json`. The
manifest is written (temp, fsync, rename, directory fsync) only after every shard is durable, so
a crash at any moment leaves either a committed checkpoint or a directory without a manifest, which
`committed` ignores. `committed` also checks that every listed shard has its recorded size; full
SHA-256 verification happens on load (or `verify`).
"""

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from shipyard.checkpoint.plan import Piece, TensorMeta
from shipyard.checkpoint.safetensors_io import FileDigest
from shipyard.durable import write_atomic
from shipyard.errors import InvalidInput
from shipyard.hashing import canonical_json

FORMAT = 1
MANIFEST = "manifest.json"
_PREFIX = "step-"


@dataclass(frozen=True)
class ShardRecord:
    file: str
    rank: int
    digest: FileDigest


@dataclass(frozen=True)
class CheckpointManifest:
    """Everything needed to load and audit one checkpoint (format version `FORMAT`)."""

    step: int
    world_size: int
    shards: list[ShardRecord]
    tensors: list[TensorMeta]
    pieces: list[Piece]
    skeleton: dict[str, Any]
    rng: list[dict[str, Any]]  # per saving rank
    loader: dict[str, Any] | None = None
    config_hash: str | None = None
    code_version: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> bytes:
        return canonical_json(
            {
                "format": FORMAT,
                "kind": "shipyard-checkpoint",
                "step": self.step,
                "world_size": self.world_size,
                "shards": [
                    {
                        "file": s.file,
                        "rank": s.rank,
                        "size": s.digest.size,
                        "sha256": s.digest.sha256,
                    }
                    for s in self.shards
                ],
                "tensors": [
                    {"path": t.path, "dtype": str(t.dtype).removeprefix("torch."), "shape": t.shape}
                    for t in self.tensors
                ],
                "pieces": [[p.path, p.start, p.stop, p.rank] for p in self.pieces],
                "skeleton": self.skeleton,
                "rng": self.rng,
                "loader": self.loader,
                "config_hash": self.config_hash,
                "code_version": self.code_version,
                "metadata": self.metadata,
            }
        )

    @classmethod
    def from_json(cls, raw: bytes, where: str) -> "CheckpointManifest":
        try:
            data = json.loads(raw)
            if data.get("format") != FORMAT:
                raise InvalidInput(f"{where}: checkpoint format {data.get('format')} is unknown")
            return cls(
                step=int(data["step"]),
                world_size=int(data["world_size"]),
                shards=[
                    ShardRecord(s["file"], int(s["rank"]), FileDigest(int(s["size"]), s["sha256"]))
                    for s in data["shards"]
                ],
                tensors=[
                    TensorMeta(t["path"], getattr(torch, t["dtype"]), tuple(t["shape"]))
                    for t in data["tensors"]
                ],
                pieces=[Piece(p, int(a), int(b), int(r)) for p, a, b, r in data["pieces"]],
                skeleton=data["skeleton"],
                rng=data["rng"],
                loader=data.get("loader"),
                config_hash=data.get("config_hash"),
                code_version=data.get("code_version"),
                metadata=data.get("metadata") or {},
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InvalidInput(f"{where}: malformed checkpoint manifest ({exc!r})") from exc


@dataclass(frozen=True)
class Committed:
    """A committed checkpoint on storage."""

    path: Path
    manifest: CheckpointManifest

    @property
    def step(self) -> int:
        return self.manifest.step


def step_dir(root: Path, step: int) -> Path:
    return root / f"{_PREFIX}{step:010d}"


def shard_name(rank: int, world_size: int) -> str:
    return f"shard-{rank:05d}-of-{world_size:05d}.safetensors"


def commit(directory: Path, manifest: CheckpointManifest) -> Committed:
    write_atomic(directory / MANIFEST, manifest.to_json())
    return Committed(directory, manifest)


def open_committed(directory: Path) -> Committed | None:
    """The checkpoint in `directory` if it is committed and whole, else None."""
    try:
        manifest = CheckpointManifest.from_json((directory / MANIFEST).read_bytes(), str(directory))
    except (FileNotFoundError, InvalidInput):
        return None
    for shard in manifest.shards:
        path = directory / shard.file
        if not path.is_file() or path.stat().st_size != shard.digest.size:
            return None
    return Committed(directory, manifest)


def step_dirs(root: Path) -> list[tuple[int, Path]]:
    """(step, directory) of every checkpoint directory under `root`, committed or not, by step."""
    found = []
    for path in root.glob(f"{_PREFIX}*") if root.is_dir() else []:
        suffix = path.name.removeprefix(_PREFIX)
        if path.is_dir() and suffix.isdigit():
            found.append((int(suffix), path))
    return sorted(found)


def committed(root: Path) -> list[Committed]:
    """Every committed, whole checkpoint under `root`, oldest first."""
    return [c for _, path in step_dirs(root) if (c := open_committed(path)) is not None]


def latest_committed(root: str | Path) -> Committed | None:
    """The newest committed checkpoint under `root`; never a torn one."""
    for _, path in reversed(step_dirs(Path(root))):
        found = open_committed(path)
        if found is not None:
            return found
    return None
