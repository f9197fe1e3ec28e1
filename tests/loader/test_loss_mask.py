"""Loss masks: a `loss_mask/` sibling dataset packs in line with its tokens, or is refused."""

from pathlib import Path

import numpy as np
import pytest

from shipyard.errors import InvalidInput
from shipyard.loader import (
    LOSS_MASK_DIR,
    LoaderSpec,
    MixturePhase,
    Sampler,
    Source,
    TokenDatasetWriter,
)
from shipyard.loader.torch_data import make_dataloader


def write_masked(directory: Path, seed: int, docs: int, cut: int = 0) -> Path:
    """Random documents whose mask is each token's parity (odd = target), so a batch's mask can
    be checked against its tokens; `cut` drops that many mask values from document 3."""
    rng = np.random.default_rng(seed)
    with (
        TokenDatasetWriter(directory, 1000, shard_tokens=1500) as tokens,
        TokenDatasetWriter(directory / LOSS_MASK_DIR, 2, shard_tokens=700) as mask,
    ):
        for doc in range(docs):
            ids = rng.integers(0, 1000, int(rng.integers(1, 90)))
            tokens.add(ids)
            mask.add((ids % 2)[: len(ids) - cut if doc == 3 else None])
    return directory


def test_batches_carry_the_mask_aligned_with_their_tokens(tmp_path: Path) -> None:
    masked = write_masked(tmp_path / "sft", seed=1, docs=200)
    plain = tmp_path / "plain"
    with TokenDatasetWriter(plain, 1000) as writer:
        for _ in range(100):
            writer.add(np.arange(50) * 2)  # even tokens: unmasked would read as 0
    spec = LoaderSpec(
        sources=(Source("sft", str(masked)), Source("plain", str(plain))),
        seq_len=33,
        global_batch=6,
        mixture=(MixturePhase(0, (2.0, 1.0)),),
    )
    sampler = Sampler(spec)
    for step in (0, 1, 7, 60):  # 60: past the first epoch of the masked source
        for rank in range(2):
            batch = sampler.batch(step, rank, 2)
            assert batch.loss_mask is not None and batch.loss_mask.shape == batch.tokens.shape
            from_mask = batch.sources == 0
            assert from_mask.any() and (~from_mask).any()
            expected = batch.tokens[from_mask] % 2 == 1
            assert np.array_equal(batch.loss_mask[from_mask], expected)
            assert batch.loss_mask[~from_mask].all()  # no mask: every token is a target


def test_a_dataset_without_a_mask_gives_none(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    with TokenDatasetWriter(plain, 1000) as writer:
        writer.add(np.arange(100))
    spec = LoaderSpec(sources=(Source("p", str(plain)),), seq_len=10, global_batch=2)
    assert Sampler(spec).batch(0).loss_mask is None


def test_a_mask_of_other_document_lengths_is_refused_by_name(tmp_path: Path) -> None:
    masked = write_masked(tmp_path / "sft", seed=2, docs=20, cut=1)
    spec = LoaderSpec(sources=(Source("sft", str(masked)),), seq_len=8, global_batch=2)
    with pytest.raises(InvalidInput, match=r"loss_mask: document 3 has \d+ mask values"):
        Sampler(spec)


def test_a_mask_of_another_vocabulary_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "sft"
    with TokenDatasetWriter(data, 1000) as tokens, TokenDatasetWriter(data / LOSS_MASK_DIR, 3) as m:
        tokens.add(np.arange(40))
        m.add(np.zeros(40, dtype=np.int64))
    spec = LoaderSpec(sources=(Source("sft", str(data)),), seq_len=8, global_batch=2)
    with pytest.raises(InvalidInput, match="loss_mask: vocab_size is 3, expected 2"):
        Sampler(spec)


def test_the_torch_adapter_carries_the_mask(tmp_path: Path) -> None:
    masked = write_masked(tmp_path / "sft", seed=3, docs=50)
    spec = LoaderSpec(sources=(Source("sft", str(masked)),), seq_len=16, global_batch=4)
    (item,) = list(make_dataloader(spec, start_step=2, stop_step=3, num_workers=0))
    want = Sampler(spec).batch(2)
    assert want.loss_mask is not None
    np.testing.assert_array_equal(item["loss_mask"].numpy(), want.loss_mask)
