"""Small token datasets shared by the loader tests."""

from pathlib import Path

import numpy as np
import pytest

from shipyard.loader import TokenDatasetWriter


def write_dataset(
    directory: Path, seed: int, docs: int, vocab: int = 5000, empty: float = 0.0
) -> Path:
    """`docs` random documents of 1..119 tokens, a share `empty` of them left empty."""
    rng = np.random.default_rng(seed)
    with TokenDatasetWriter(directory, vocab, shard_tokens=2000) as writer:
        for _ in range(docs):
            length = 0 if empty and rng.random() < empty else int(rng.integers(1, 120))
            writer.add(rng.integers(0, vocab, length))
    return directory


@pytest.fixture
def datasets(tmp_path: Path) -> list[Path]:
    return [write_dataset(tmp_path / f"ds{i}", seed=i, docs=300 + 100 * i) for i in range(3)]
