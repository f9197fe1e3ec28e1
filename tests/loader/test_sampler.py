"""The sampler: purity, rank split, elasticity, packing, skip windows."""

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from tests.loader.conftest import write_dataset

from shipyard.errors import InvalidInput
from shipyard.loader import LoaderSpec, MixturePhase, Sampler, Source, TokenDataset


def _spec(paths: list[Path], **kw: object) -> LoaderSpec:
    sources = tuple(Source(f"s{i}", str(p)) for i, p in enumerate(paths))
    return LoaderSpec(sources=sources, **{"seq_len": 64, "global_batch": 12, "seed": 7, **kw})  # type: ignore[arg-type]


def test_batches_are_a_pure_function_of_the_step(datasets: list[Path]) -> None:
    spec = _spec(datasets)
    a, b = Sampler(spec), Sampler(LoaderSpec.from_dict(spec.to_dict()))
    for step in (0, 5, 3, 40, 5):
        np.testing.assert_array_equal(a.batch(step).tokens, b.batch(step).tokens)
    other_seed = Sampler(_spec(datasets, seed=8))
    assert not np.array_equal(a.batch(0).tokens, other_seed.batch(0).tokens)


def test_elastic_world_sizes_read_exactly_the_global_batches(datasets: list[Path]) -> None:
    sampler = Sampler(_spec(datasets))
    worlds = [4] * 5 + [2] * 5 + [3] * 5 + [5] * 3  # 5 does not divide 12: uneven parts
    for step, world in enumerate(worlds):
        parts = [sampler.batch(step, rank, world) for rank in range(world)]
        joined = np.concatenate([p.tokens for p in parts])
        np.testing.assert_array_equal(joined, sampler.batch(step).tokens)
        assert len({len(p.tokens) for p in parts}) <= 2


def test_packing_reads_each_epoch_as_a_permutation_of_the_documents(tmp_path: Path) -> None:
    path = write_dataset(tmp_path / "one", seed=3, docs=50)
    dataset = TokenDataset(path)
    spec = LoaderSpec(sources=(Source("one", str(path)),), seq_len=16, global_batch=4)
    sampler = Sampler(spec)
    per_epoch = dataset.num_tokens // 16
    batches = [sampler.batch(s) for s in range((2 * per_epoch) // 4)]
    ids = np.concatenate([b.sample_ids for b in batches])
    np.testing.assert_array_equal(ids, np.arange(len(ids)))  # nothing skipped or repeated
    rows = [row for b in batches for row in b.tokens][:per_epoch]
    all_starts = [d for bb in batches for d in bb.doc_starts]
    starts = [i * 16 + off for i, row_starts in enumerate(all_starts) for off in row_starts]
    starts = [s for s in starts if s < per_epoch * 16]
    stream = np.concatenate(rows)
    segments = [tuple(x) for x in np.split(stream, starts[1:])]
    assert starts[0] == 0
    # Every segment but the last is a whole document, each document at most once; the last is
    # the start of one of the documents left over (the epoch's dropped tail).
    left = Counter(tuple(dataset.document(i).tolist()) for i in range(dataset.num_docs))
    left.subtract(Counter(segments[:-1]))
    assert min(left.values()) >= 0
    rest = [doc for doc, n in left.items() if n]
    assert any(doc[: len(segments[-1])] == segments[-1] for doc in rest)
    assert sum(len(d) for d in rest) - len(segments[-1]) == dataset.num_tokens % 16
    second = np.concatenate([row for b in batches for row in b.tokens][per_epoch:])
    assert not np.array_equal(second[:64], stream[:64])  # each epoch is reshuffled


def test_skip_windows_skip_exactly_those_data_steps(datasets: list[Path]) -> None:
    plain = Sampler(_spec(datasets))
    skipping = Sampler(_spec(datasets).skipping(3, 4).skipping(5, 2))
    assert [skipping.spec.data_step(s) for s in range(8)] == [0, 1, 2, 7, 8, 11, 12, 13]
    for step in range(8):
        want = plain.batch(skipping.spec.data_step(step)).tokens
        np.testing.assert_array_equal(skipping.batch(step).tokens, want)


def test_bad_spec_names_the_field(datasets: list[Path]) -> None:
    with pytest.raises(InvalidInput, match="seq_len"):
        _spec(datasets, seq_len=0)
    with pytest.raises(InvalidInput, match="skip"):
        _spec(datasets, skip=((3, 5), (4, 6)))
    with pytest.raises(InvalidInput, match="mixture"):
        _spec(datasets, mixture=(MixturePhase(1, (1, 1, 1)),))
    with pytest.raises(InvalidInput, match="rank 3"):
        Sampler(_spec(datasets)).batch(0, 3, 3)
