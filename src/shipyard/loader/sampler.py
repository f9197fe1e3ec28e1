"""The sampler: (spec, step, rank, world size) → the exact samples and tokens a rank trains on.

Training step `s` reads data step `d = spec.data_step(s)` (skip windows removed), whose global
batch is sample positions `[d*B, (d+1)*B)`. The mixture phase in force assigns each position a
source and that source's running sample number, which `PackedSource` turns into tokens. Rank `r`
of `W` takes positions `[floor(r*B/W), floor((r+1)*B/W))` of the batch, so the ranks of any world
size together read exactly the global batch: changing the world size at a step boundary skips and
repeats nothing. Nothing is saved but the step.
"""

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from shipyard.errors import InvalidInput
from shipyard.loader.dataset import TokenDataset
from shipyard.loader.mixing import Mixture
from shipyard.loader.packing import PackedSource
from shipyard.loader.spec import LoaderSpec


@dataclass(frozen=True)
class Batch:
    """One rank's part of one step's global batch."""

    step: int
    data_step: int
    rank: int
    world_size: int
    tokens: npt.NDArray[np.int64]  # (samples, seq_len)
    sources: npt.NDArray[np.int64]  # index into spec.sources, per sample
    sample_ids: npt.NDArray[np.int64]  # that source's running sample number, per sample
    doc_starts: list[list[int]]  # per sample, offsets where a document begins


def rank_range(global_batch: int, rank: int, world_size: int) -> tuple[int, int]:
    """The slice of a global batch that `rank` of `world_size` reads."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise InvalidInput(f"rank {rank} is not in a world of size {world_size}")
    return rank * global_batch // world_size, (rank + 1) * global_batch // world_size


class Sampler:
    def __init__(self, spec: LoaderSpec, datasets: Sequence[TokenDataset] | None = None) -> None:
        self.spec = spec
        datasets = datasets or [TokenDataset(s.path) for s in spec.sources]
        if len(datasets) != len(spec.sources):
            raise InvalidInput(f"{len(datasets)} datasets given for {len(spec.sources)} sources")
        self.sources = [
            PackedSource(ds, src.name, spec.seq_len, spec.seed)
            for ds, src in zip(datasets, spec.sources, strict=True)
        ]
        self.datasets = list(datasets)
        batch = spec.global_batch
        self._mixtures = [Mixture(p.weights) for p in spec.phases]
        # Each phase's first global position and each source's count before it.
        self._phase_starts = [spec.data_step(p.start_step) * batch for p in spec.phases]
        self._bases = [np.zeros(len(spec.sources), dtype=np.int64)]
        for i in range(1, len(self._mixtures)):
            span = self._phase_starts[i] - self._phase_starts[i - 1]
            self._bases.append(self._bases[-1] + self._mixtures[i - 1].counts(span))

    def _phase(self, position: int) -> int:
        return bisect.bisect_right(self._phase_starts, position) - 1

    def sample_ids(
        self, step: int, rank: int = 0, world_size: int = 1
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(source, source sample number) of each sample this rank reads at `step`."""
        lo, hi = rank_range(self.spec.global_batch, rank, world_size)
        first = self.spec.data_step(step) * self.spec.global_batch
        p = self._phase(first)
        offset = first - self._phase_starts[p]
        sources, before = self._mixtures[p].assign(offset + lo, offset + hi)
        return sources, self._bases[p][sources] + before

    def consumed(self, step: int) -> dict[str, int]:
        """Samples drawn from each source before training step `step` (skipped ones included)."""
        position = self.spec.data_step(step) * self.spec.global_batch
        p = self._phase(position)
        counts = self._bases[p] + self._mixtures[p].counts(position - self._phase_starts[p])
        return {s.name: int(c) for s, c in zip(self.spec.sources, counts, strict=True)}

    def batch(self, step: int, rank: int = 0, world_size: int = 1) -> Batch:
        sources, ids = self.sample_ids(step, rank, world_size)
        tokens = np.empty((len(ids), self.spec.seq_len), dtype=np.int64)
        doc_starts: list[list[int]] = [[] for _ in range(len(ids))]
        for src in np.unique(sources).tolist():
            rows = np.flatnonzero(sources == src)
            part = self.sources[src].read(ids[rows], tokens, rows)
            for row, starts in zip(rows.tolist(), part, strict=True):
                doc_starts[row] = starts
        return Batch(
            step,
            self.spec.data_step(step),
            rank,
            world_size,
            tokens,
            sources,
            ids,
            doc_starts,
        )

    def position(self, step: int) -> dict[str, Any]:
        """What a checkpoint records to resume at `step`: the step and, for audit, the rest."""
        return {
            "step": step,
            "data_step": self.spec.data_step(step),
            "consumed": self.consumed(step),
            "datasets": {
                s.name: ds.fingerprint
                for s, ds in zip(self.spec.sources, self.datasets, strict=True)
            },
            "spec": self.spec.to_dict(),
        }
