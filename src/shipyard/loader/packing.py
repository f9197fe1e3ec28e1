"""Packing: one source's documents, shuffled per epoch, cut into fixed-length samples.

Epoch `e` orders the documents by a permutation seeded by (seed, source name, e) and reads them
back to back as one token stream; sample `i` of the epoch is tokens `[i*L, (i+1)*L)` of that
stream, so a sample can span documents (its `doc_starts` say where each new one begins) and no
token is padding. The tail shorter than `L` is dropped in each epoch. Sample `k` overall is sample
`k % per_epoch` of epoch `k // per_epoch`: a pure function, computed from the cached permutation
and its cumulative lengths with one binary search.
"""

import zlib
from collections import OrderedDict
from typing import Any

import numpy as np
import numpy.typing as npt

from shipyard.errors import InvalidInput
from shipyard.loader.dataset import TokenDataset

_EPOCHS_CACHED = 2


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
        # Per global document: which shard holds it and where its tokens start there.
        self._shard_of = np.repeat(
            np.arange(len(dataset.shards)), [s.num_docs for s in dataset.shards]
        )
        self._tokens = [shard.tokens for shard in dataset.shards]
        self._start_of = np.concatenate([s.offsets[:-1].astype(np.int64) for s in dataset.shards])
        self._epochs: OrderedDict[int, tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]] = (
            OrderedDict()
        )

    def _epoch(self, epoch: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(document permutation, cumulative token ends in that order) for `epoch`."""
        cached = self._epochs.get(epoch)
        if cached is None:
            rng = np.random.default_rng([*self._seed, epoch])
            order = rng.permutation(len(self._lengths))
            cached = (order, np.cumsum(self._lengths[order]))
            self._epochs[epoch] = cached
            if len(self._epochs) > _EPOCHS_CACHED:
                self._epochs.popitem(last=False)
        else:
            self._epochs.move_to_end(epoch)
        return cached

    def read(self, k: int, out: npt.NDArray[Any]) -> list[int]:
        """Write sample `k` into `out` (length `seq_len`); returns where documents start in it."""
        epoch, i = divmod(k, self.per_epoch)
        order, ends = self._epoch(epoch)
        first = i * self.seq_len
        pos, stop = first, first + self.seq_len
        j = int(ends.searchsorted(pos, side="right"))
        doc_starts: list[int] = []
        while pos < stop:
            doc = int(order[j])
            doc_end = int(ends[j])
            doc_begin = doc_end - int(self._lengths[doc])
            j += 1
            if doc_begin == doc_end:  # an empty document starts nothing
                continue
            if pos == doc_begin:
                doc_starts.append(pos - first)
            take = min(stop, doc_end)
            base = int(self._start_of[doc]) - doc_begin
            tokens = self._tokens[self._shard_of[doc]]
            out[pos - first : take - first] = tokens[base + pos : base + take]
            pos = take
        return doc_starts
