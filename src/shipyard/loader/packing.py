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

    def read(
        self, ks: npt.NDArray[np.int64], out: npt.NDArray[Any], out_rows: npt.NDArray[np.int64]
    ) -> list[list[int]]:
        """Write sample `ks[i]` into `out[out_rows[i]]`; returns where documents start in each.

        The segment arithmetic (which documents, which token ranges) is vectorized over the
        whole request, leaving one slice copy per (sample, document) segment.
        """
        doc_starts: list[list[int]] = [[] for _ in range(len(ks))]
        epochs, within = np.divmod(ks, self.per_epoch)
        for epoch in np.unique(epochs).tolist():
            rows = np.flatnonzero(epochs == epoch)
            targets = (rows, out_rows[rows])
            self._read_epoch(epoch, within[rows] * self.seq_len, targets, out, doc_starts)
        return doc_starts

    def _read_epoch(
        self,
        epoch: int,
        starts: npt.NDArray[np.int64],
        targets: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]],
        out: npt.NDArray[Any],
        doc_starts: list[list[int]],
    ) -> None:
        order, ends = self._epoch(epoch)
        first = ends.searchsorted(starts, side="right")  # first document each sample touches
        last = ends.searchsorted(starts + self.seq_len - 1, side="right")
        counts = last - first + 1
        sample = np.repeat(np.arange(len(starts)), counts)
        j = first[sample] + np.arange(len(sample)) - np.repeat(np.cumsum(counts) - counts, counts)
        doc = order[j]
        doc_end = ends[j]
        doc_begin = doc_end - self._lengths[doc]
        lo = np.maximum(doc_begin, starts[sample])
        hi = np.minimum(doc_end, starts[sample] + self.seq_len)
        keep = hi > lo  # empty documents give empty segments
        sample, doc, doc_begin, lo, hi = (
            sample[keep],
            doc[keep],
            doc_begin[keep],
            lo[keep],
            hi[keep],
        )
        source = (self._start_of[doc] + lo - doc_begin).tolist()
        offset = (lo - starts[sample]).tolist()
        length = (hi - lo).tolist()
        begins = (lo == doc_begin).tolist()
        tokens = self._tokens
        requests, rows = targets
        for request, row, shard, src, dst, n, begins_doc in zip(
            requests[sample].tolist(),
            rows[sample].tolist(),
            self._shard_of[doc].tolist(),
            source,
            offset,
            length,
            begins,
            strict=True,
        ):
            out[row, dst : dst + n] = tokens[shard][src : src + n]
            if begins_doc:
                doc_starts[request].append(dst)
