"""The sampler: (spec, step, rank, world size) → the exact samples and tokens a rank trains on.

Training step `s` reads data step `d = spec.data_step(s)` (skip windows removed), whose global
batch is sample positions `[d*B, (d+1)*B)`. The mixture phase in force assigns each position a
source and that source's running sample number, which `PackedSource` turns into tokens. Rank `r`
of `W` takes positions `[floor(r*B/W), floor((r+1)*B/W))` of the batch, so the ranks of any world
size together read exactly the global batch: changing the world size at a step boundary skips and
repeats nothing. Nothing is saved but the step.
"""

import bisect
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from shipyard.errors import InvalidInput
from shipyard.loader.dataset import TokenDataset
from shipyard.loader.loss_mask import open_loss_mask
from shipyard.loader.mixing import Mixture
from shipyard.loader.packing import PackedSource, Part, doc_starts
from shipyard.loader.spec import LoaderSpec

Ids = npt.NDArray[np.int64]


class _Layout(NamedTuple):
    """Which source each row of a rank's part reads, and which of that source's samples.

    It depends only on where the part starts within the mixture period and its length, so it
    is computed once and reused by every step that starts there.
    """

    sources: Ids  # per row (read-only: shared by every step with this layout)
    rank_in_source: Ids  # per row: its index among its source's rows
    before: list[int]  # per source: its samples in the period before the part starts
    counts: list[int]  # per source: rows it fills
    rows: list[npt.NDArray[np.intp]]  # per source: the rows it fills, in order


@functools.lru_cache(maxsize=256)  # a few entries per world size in practice; bounded anyway
def _layout(mixture: Mixture, rest: int, length: int) -> _Layout:
    sources, before = mixture.assign(rest, rest + length)
    at_rest = mixture.counts(rest)
    rank_in_source = before - at_rest[sources]
    rows = [np.flatnonzero(sources == src) for src in range(len(mixture.weights))]
    for array in (sources, rank_in_source, *rows):
        array.setflags(write=False)
    return _Layout(sources, rank_in_source, at_rest.tolist(), [len(r) for r in rows], rows)


@dataclass(frozen=True)
class Batch:
    """One rank's part of one step's global batch."""

    step: int
    data_step: int
    rank: int
    world_size: int
    tokens: npt.NDArray[np.int64]  # (samples, seq_len)
    sources: npt.NDArray[np.int64]  # index into spec.sources, per sample
    # Where the batch came from, kept to work out `sample_ids` and `doc_starts` on demand.
    _layout: _Layout = field(repr=False, compare=False)
    _first: list[int] = field(repr=False, compare=False)  # per source: its first sample
    _parts: list[tuple[Part, ...]] = field(repr=False, compare=False)  # per source: read there
    # (samples, seq_len): True where the token is a training target; None when no source has a
    # loss mask (every token is one). Rows of sources without a mask are all True.
    loss_mask: npt.NDArray[np.bool_] | None = None

    @cached_property
    def sample_ids(self) -> npt.NDArray[np.int64]:
        """Per sample, its source's running sample number."""
        return _sample_ids(self._layout, self._first)

    @cached_property
    def doc_starts(self) -> list[list[int]]:
        """Per sample, offsets where a document begins (worked out on first use: most callers
        never ask, and building the lists costs about as much as gathering the tokens)."""
        starts: list[list[int]] = [[] for _ in range(len(self.sources))]
        for rows, parts in zip(self._layout.rows, self._parts, strict=True):
            for row, row_starts in zip(rows.tolist(), doc_starts(parts), strict=True):
                starts[row] = row_starts
        return starts


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
        # Packed with the same name, length and seed, a mask reads the same stretches as its tokens.
        masks = [open_loss_mask(ds) for ds in datasets]
        self.masks = [
            PackedSource(mask, src.name, spec.seq_len, spec.seed) if mask else None
            for mask, src in zip(masks, spec.sources, strict=True)
        ]
        batch = spec.global_batch
        self._mixtures = [Mixture(p.weights) for p in spec.phases]
        # Each phase's first global position and each source's count before it.
        self._phase_starts = [spec.data_step(p.start_step) * batch for p in spec.phases]
        self._bases = [[0] * len(spec.sources)]
        for i in range(1, len(self._mixtures)):
            span = self._phase_starts[i] - self._phase_starts[i - 1]
            self._bases.append((self._bases[-1] + self._mixtures[i - 1].counts(span)).tolist())

    def _phase(self, position: int) -> int:
        return bisect.bisect_right(self._phase_starts, position) - 1

    def _plan(self, data_step: int, rank: int, world_size: int) -> tuple[_Layout, list[int]]:
        """The layout of `rank`'s part of `data_step`'s batch and each source's first sample."""
        lo, hi = rank_range(self.spec.global_batch, rank, world_size)
        position = data_step * self.spec.global_batch
        p = self._phase(position)
        start = position - self._phase_starts[p] + lo
        mixture = self._mixtures[p]
        cycles, rest = divmod(start, mixture.period)
        layout = _layout(mixture, rest, hi - lo)
        # In Python ints: for two or three sources numpy's per-call cost would dominate.
        first = [
            base + cycles * w + b
            for base, w, b in zip(self._bases[p], mixture.weights, layout.before, strict=True)
        ]
        return layout, first

    def sample_ids(
        self, step: int, rank: int = 0, world_size: int = 1
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(source, source sample number) of each sample this rank reads at `step`."""
        layout, first = self._plan(self.spec.data_step(step), rank, world_size)
        return layout.sources.copy(), _sample_ids(layout, first)

    def consumed(self, step: int) -> dict[str, int]:
        """Samples drawn from each source before training step `step` (skipped ones included)."""
        position = self.spec.data_step(step) * self.spec.global_batch
        p = self._phase(position)
        counts = np.add(self._bases[p], self._mixtures[p].counts(position - self._phase_starts[p]))
        return {s.name: int(c) for s, c in zip(self.spec.sources, counts, strict=True)}

    def batch(self, step: int, rank: int = 0, world_size: int = 1) -> Batch:
        data_step = self.spec.data_step(step)
        layout, first = self._plan(data_step, rank, world_size)
        tokens = np.empty((len(layout.sources), self.spec.seq_len), dtype=np.int64)
        parts: list[tuple[Part, ...]] = [()] * len(self.sources)
        for src, (source, rows) in enumerate(zip(self.sources, layout.rows, strict=True)):
            if len(rows):
                parts[src] = source.read_into(first[src], rows, tokens)
        return Batch(
            step,
            data_step,
            rank,
            world_size,
            tokens,
            layout.sources.copy(),
            layout,
            first,
            parts,
            self._loss_mask(layout, first),
        )

    def _loss_mask(self, layout: _Layout, first: list[int]) -> npt.NDArray[np.bool_] | None:
        if not any(self.masks):
            return None
        mask = np.ones((len(layout.sources), self.spec.seq_len), dtype=np.int64)
        for src, (source, rows) in enumerate(zip(self.masks, layout.rows, strict=True)):
            if source is not None and len(rows):
                source.read_into(first[src], rows, mask)
        targets: npt.NDArray[np.bool_] = mask != 0
        return targets

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


def _sample_ids(layout: _Layout, first: list[int]) -> Ids:
    ids: Ids = np.array(first, dtype=np.int64)[layout.sources] + layout.rank_in_source
    return ids
