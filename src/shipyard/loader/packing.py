"""Packing: one source's documents, shuffled per epoch, cut into fixed-length samples.

Epoch `e` orders the documents by a permutation seeded by (seed, source name, e) and reads them
back to back as one token stream; sample `i` of the epoch is tokens `[i*L, (i+1)*L)` of that
stream, so a sample can span documents (its `doc_starts` say where each new one begins) and no
token is padding. The tail shorter than `L` is dropped in each epoch. Sample `k` overall is sample
`k % per_epoch` of epoch `k // per_epoch`: a pure function.

Reading is the hot path of training. The samples a batch takes from a source are consecutive, so
they are one contiguous stretch of the epoch's stream: the documents between two binary searches
in the epoch's bounds (cached for two epochs). An epoch keeps each document's address in epoch
order, so those documents are one slice of it, which `_gather.widen_into` (C) copies into the
batch's rows, widening to int64 on the way: each token is read once and written once.
"""

import zlib
from collections import OrderedDict
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from shipyard.errors import InvalidInput
from shipyard.loader._gather import widen_into
from shipyard.loader.dataset import TokenDataset

_EPOCHS_CACHED = 2


class Epoch(NamedTuple):
    addresses: npt.NDArray[np.uint64]  # the documents in epoch order: first token's address
    bounds: npt.NDArray[np.int64]  # document j is stream tokens [bounds[j], bounds[j + 1])

    def documents(self, lo: int, hi: int) -> tuple[int, int]:
        """The first and last document holding tokens of the stretch `[lo, hi)` (`lo < hi`)."""
        j0, j1 = self.bounds.searchsorted((lo, hi - 1), side="right").tolist()
        return j0 - 1, j1 - 1


Part = tuple[Epoch, int, int, int]  # (epoch, first sample, samples, seq_len): where a run reads


def doc_starts(parts: tuple[Part, ...]) -> list[list[int]]:
    """Per sample of a run, the offsets at which a (non-empty) document begins."""
    starts: list[list[int]] = []
    for epoch, first, count, seq_len in parts:
        lo, hi = first * seq_len, (first + count) * seq_len
        j0, j1 = epoch.documents(lo, hi)
        begins, ends = epoch.bounds[j0 : j1 + 1], epoch.bounds[j0 + 1 : j1 + 2]
        kept = begins[(ends > begins) & (begins >= lo)] - lo
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
        self.dtype = dataset.shards[0].dtype
        # Per document, the address of its first token. Shards are mapped for the life of the
        # dataset, which this source holds, so the addresses stay valid (in this process).
        self._addresses = np.concatenate(
            [
                shard.tokens.ctypes.data + shard.offsets[:-1] * np.uint64(self.dtype.itemsize)
                for shard in dataset.shards
            ]
        ).astype(np.uint64)
        self._epochs: OrderedDict[int, Epoch] = OrderedDict()

    def epoch(self, epoch: int) -> Epoch:
        """`epoch`'s documents in order and their bounds, built on first use (two are cached)."""
        cached = self._epochs.get(epoch)
        if cached is None:
            rng = np.random.default_rng([*self._seed, epoch])
            order = rng.permutation(len(self._lengths))
            bounds = np.zeros(len(order) + 1, dtype=np.int64)
            np.cumsum(self._lengths[order], out=bounds[1:])
            cached = self._epochs[epoch] = Epoch(self._addresses[order], bounds)
            if len(self._epochs) > _EPOCHS_CACHED:
                self._epochs.popitem(last=False)
        else:
            self._epochs.move_to_end(epoch)
        return cached

    def read_into(
        self, first: int, rows: npt.NDArray[np.intp], out: npt.NDArray[np.int64]
    ) -> tuple[Part, ...]:
        """Copy samples `first, first + 1, ...` into `rows` of `out` (int64, `seq_len` wide);
        returns where they were read, one part per epoch touched."""
        parts: list[Part] = []
        done, seq_len = 0, self.seq_len
        while done < len(rows):
            e, i = divmod(first + done, self.per_epoch)
            n = min(len(rows) - done, self.per_epoch - i)
            epoch = self.epoch(e)
            lo = i * seq_len
            j0, j1 = epoch.documents(lo, lo + n * seq_len)
            widen_into(
                epoch.addresses[j0 : j1 + 1],
                epoch.bounds[j0 : j1 + 2],
                lo,
                self.dtype.itemsize,
                rows[done : done + n],
                seq_len,
                out,
            )
            parts.append((epoch, i, n, seq_len))
            done += n
        return tuple(parts)
