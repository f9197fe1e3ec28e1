"""Packing pinned against a slow, obviously correct reading of its definition.

The reference builds each epoch's stream by concatenating the documents in permuted order and
cuts samples out of it, so any change to the tokens a (seed, step, rank, world, spec) reads —
by the epoch plans, the mixing layouts or the batched copy — fails here.
"""

import zlib
from functools import cache
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from tests.loader.conftest import write_dataset

from shipyard.loader import LoaderSpec, MixturePhase, Sampler, Source, TokenDataset

Stream = tuple[npt.NDArray[np.int64], list[int]]


class Reference:
    def __init__(self, spec: LoaderSpec) -> None:
        self.spec = spec
        self.datasets = [TokenDataset(s.path) for s in spec.sources]
        self.stream = cache(self._stream)

    def _stream(self, source: int, epoch: int) -> Stream:
        """The epoch's tokens back to back, and where each non-empty document begins."""
        dataset = self.datasets[source]
        seed = [self.spec.seed, zlib.crc32(self.spec.sources[source].name.encode()), epoch]
        order = np.random.default_rng(seed).permutation(dataset.num_docs)
        docs = [dataset.document(int(d)).astype(np.int64) for d in order]
        ends = np.cumsum([len(d) for d in docs])
        begins = [int(e) - len(d) for e, d in zip(ends, docs, strict=True) if len(d)]
        return np.concatenate(docs), begins

    def sample(self, source: int, k: int) -> tuple[npt.NDArray[np.int64], list[int]]:
        L = self.spec.seq_len
        per_epoch = self.datasets[source].num_tokens // L
        epoch, i = divmod(k, per_epoch)
        tokens, begins = self.stream(source, epoch)
        return tokens[i * L : (i + 1) * L], [b - i * L for b in begins if i * L <= b < (i + 1) * L]


@pytest.fixture
def mixed(tmp_path: Path) -> list[Path]:
    """A large and a tiny source (many epochs), one with empty documents and 32-bit tokens."""
    return [
        write_dataset(tmp_path / "big", seed=1, docs=300),
        write_dataset(tmp_path / "tiny", seed=2, docs=12, vocab=70_000, empty=0.25),
    ]


@pytest.mark.parametrize(
    ("weights", "seq_len", "batch"),
    [((0.7, 0.3), 64, 12), ((0.5, 0.5), 37, 7), ((0.2137, 0.7863), 16, 5), ((1.0, 0.0), 100, 3)],
)
def test_batches_match_the_reference(
    mixed: list[Path], weights: tuple[float, float], seq_len: int, batch: int
) -> None:
    spec = LoaderSpec(
        sources=(Source("big", str(mixed[0])), Source("tiny", str(mixed[1]))),
        seq_len=seq_len,
        global_batch=batch,
        seed=5,
        mixture=(MixturePhase(0, weights),),
    ).with_phase(30, (0.4, 0.6))
    sampler, reference = Sampler(spec.skipping(10, 3)), Reference(spec)
    for step in [*range(45), 400, 123, 7]:
        for world in (1, 2, batch + 1):  # batch + 1: some ranks read nothing
            for rank in {0, world // 2, world - 1}:
                got = sampler.batch(step, rank, world)
                assert got.tokens.dtype == np.int64
                assert got.tokens.shape == (len(got.sample_ids), seq_len)
                for row, (src, k) in enumerate(zip(got.sources, got.sample_ids, strict=True)):
                    want, starts = reference.sample(int(src), int(k))
                    np.testing.assert_array_equal(got.tokens[row], want)
                    assert got.doc_starts[row] == starts


def test_batches_do_not_share_memory(tmp_path: Path) -> None:
    path = write_dataset(tmp_path / "one", seed=3, docs=40)
    sampler = Sampler(LoaderSpec(sources=(Source("one", str(path)),), seq_len=8, global_batch=4))
    first = sampler.batch(0)
    again = first.tokens.copy()
    first.sources[:] = 1 - first.sources  # a caller may scribble on what it was given
    sampler.batch(1).tokens[:] = -1
    np.testing.assert_array_equal(sampler.batch(0).tokens, again)
    assert sampler.batch(0).sources.tolist() == [0, 0, 0, 0]
