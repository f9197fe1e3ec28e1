"""Packing: one source's documents, shuffled per epoch, cut into fixed-length samples.

Epoch `e` orders the documents by a permutation seeded by (seed, source name, e) and reads them
back to back as one token stream; sample `i` of the epoch is tokens `[i*L, (i+1)*L)` of that
stream, so a sample can span documents (its `doc_starts` say where each new one begins) and no
token is padding. The tail shorter than `L` is dropped in each epoch. Sample `k` overall is sample
`k % per_epoch` of epoch `k // per_epoch`: a pure function.

Reading is the hot path of training. The samples a batch takes from a source are consecutive, so
they are one contiguous stretch of the epoch's stream: the documents between two binary searches
in the epoch's cumulative lengths (cached for two epochs), the first and last one trimmed. Their
bytes are gathered with one `bytes.join` over memoryview slices of the mapped shards.
"""

import zlib
from collections import OrderedDict
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from shipyard.errors import InvalidInput
from shipyard.loader.dataset import TokenDataset

_EPOCHS_CACHED = 2


class Epoch(NamedTuple):
    order: npt.NDArray[np.int64]  # the documents, permuted
    ends: npt.NDArray[np.int64]  # cumulative token ends in that order


Part = tuple[Epoch, int, int, int]  # (epoch, first sample, samples, seq_len): where a run reads


class Run(NamedTuple):  # a tuple: made for every source of every batch, so cheap to make
    """Consecutive samples of one source: their tokens back to back (read-only, `seq_len` each)."""

    tokens: npt.NDArray[Any]
    parts: tuple[Part, ...]  # one per epoch the run touches


def doc_starts(parts: tuple[Part, ...]) -> list[list[int]]:
    """Per sample of a run, the offsets at which a (non-empty) document begins."""
    starts: list[list[int]] = []
    for (_, ends), first, count, seq_len in parts:
        lo, hi = first * seq_len, (first + count) * seq_len
        j0, j1 = ends.searchsorted((lo, hi - 1), side="right")
        begins = ends[j0 - 1 : j1] if j0 else np.concatenate([[0], ends[:j1]])
        kept = begins[(ends[j0 : j1 + 1] > begins) & (begins >= lo)] - lo
        rows: list[list[int]] = [[] for _ in range(count)]
        for row, offset in zip(*np.divmod(kept, seq_len), strict=True):
            rows[row].append(int(offset))
        starts += rows
    return starts


class PackedSource:
    def __init__(self, dataset: TokenDataset, name: str, seq_len: int, seed: int) -> None:
        self.dataset = dataset
        self.seq_len = seq_len
        self._seed = [seed, zlib.crc32(name.encode())]
        self._lengths = dataset.doc_lengths
        self.per_epoch = int(self._lengths.sum()) // seq_len
        if self.per_epoch == 0:
            raise InvalidInput(
                f"source {name!r} ({dataset.directory}) has {int(self._lengths.sum())} tokens, "
                f"fewer than one sequence of {seq_len}"
            )
        # Byte views of the shards: slicing a memoryview costs half of slicing an ndarray, and
        # `bytes.join` gathers a run's documents in one C loop.
        self._bytes = [shard.tokens.data.cast("B") for shard in dataset.shards]
        self._dtype = dataset.shards[0].dtype
        # Per document: its shard, first byte and end byte there; one fancy index finds a run's.
        shard_of = np.repeat(np.arange(len(dataset.shards)), [s.num_docs for s in dataset.shards])
        start_of = np.concatenate([s.offsets[:-1].astype(np.int64) for s in dataset.shards])
        size = self._dtype.itemsize
        self._where = np.stack([shard_of, start_of * size, (start_of + self._lengths) * size])
        self._epochs: OrderedDict[int, Epoch] = OrderedDict()

    def epoch(self, epoch: int) -> Epoch:
        """`epoch`'s permutation and cumulative lengths, built on first use (two are cached)."""
        cached = self._epochs.get(epoch)
        if cached is None:
            rng = np.random.default_rng([*self._seed, epoch])
            order = rng.permutation(len(self._lengths))
            cached = self._epochs[epoch] = Epoch(order, np.cumsum(self._lengths[order]))
            if len(self._epochs) > _EPOCHS_CACHED:
                self._epochs.popitem(last=False)
        else:
            self._epochs.move_to_end(epoch)
        return cached

    def run(self, first: int, count: int) -> Run:
        """Samples `first .. first+count-1`, copied out of the shards back to back."""
        views: list[memoryview] = []
        parts: list[Part] = []
        shards, size, seq_len = self._bytes, self._dtype.itemsize, self.seq_len
        while count > 0:
            e, i = divmod(first, self.per_epoch)
            n = min(count, self.per_epoch - i)
            epoch = self.epoch(e)
            lo, hi = i * seq_len, (i + n) * seq_len
            # The documents the stretch [lo, hi) of the stream touches, the first and last cut.
            j0, j1 = epoch.ends.searchsorted((lo, hi - 1), side="right")
            which, starts, stops = self._where.take(epoch.order[j0 : j1 + 1], axis=1).tolist()
            starts[0] = stops[0] - (int(epoch.ends[j0]) - lo) * size
            stops[-1] -= (int(epoch.ends[j1]) - hi) * size
            views += [shards[s][a:b] for s, a, b in zip(which, starts, stops, strict=True)]
            parts.append((epoch, i, n, seq_len))
            first, count = first + n, count - n
        return Run(np.frombuffer(b"".join(views), self._dtype), tuple(parts))
