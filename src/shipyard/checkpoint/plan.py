"""How replicated state is split among ranks: byte-balanced, deterministic, world-size-aware.

The tensors, in path order, form one virtual byte stream; rank `r` of `W` owns the elements that
start in bytes `[r*T/W, (r+1)*T/W)`. A large tensor is therefore cut across ranks, and every rank
writes nearly the same number of bytes whatever the sizes of individual tensors. The manifest
records every piece, so any world size can load it.
"""

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Piece:
    """Elements `[start, stop)` of the flattened tensor at `path`, owned by `rank`."""

    path: str
    start: int
    stop: int
    rank: int

    @property
    def key(self) -> str:
        """The piece's tensor name inside its safetensors file."""
        return f"{self.path}@{self.start}"


@dataclass(frozen=True)
class TensorMeta:
    path: str
    dtype: torch.dtype
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        n = 1
        for dim in self.shape:
            n *= dim
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize


def describe(tensors: dict[str, torch.Tensor]) -> list[TensorMeta]:
    return [TensorMeta(p, t.dtype, tuple(t.shape)) for p, t in sorted(tensors.items())]


def split(metas: list[TensorMeta], world_size: int) -> list[Piece]:
    """Every non-empty piece of every tensor, in path order, each with its owning rank."""
    total = sum(m.nbytes for m in metas)
    bounds = [r * total // world_size for r in range(world_size + 1)]
    pieces: list[Piece] = []
    offset = 0
    for meta in metas:
        size = meta.dtype.itemsize
        for rank in range(world_size):
            # ceil((bound - offset) / size), clamped: the first element starting at or after it.
            start = min(meta.numel, max(0, -(-(bounds[rank] - offset) // size)))
            stop = min(meta.numel, max(0, -(-(bounds[rank + 1] - offset) // size)))
            if start < stop:
                pieces.append(Piece(meta.path, start, stop, rank))
        offset += meta.nbytes
    return pieces
