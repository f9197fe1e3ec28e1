"""Token shards: round trip, dtype by vocabulary, atomic commit, corruption and bad input."""

from pathlib import Path

import numpy as np
import pytest

from shipyard.errors import IntegrityError, InvalidInput, NotFound
from shipyard.loader import TokenDataset, TokenDatasetWriter, TokenShard, TokenShardWriter
from shipyard.loader.shards import HEADER_SIZE, INDEX_SUFFIX


def _docs(seed: int, n: int, vocab: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, rng.integers(0, 50)) for _ in range(n)]


@pytest.mark.parametrize(
    ("vocab", "dtype"),
    [(50_000, np.uint16), (65_536, np.uint16), (65_537, np.uint32), (200_000, np.uint32)],
)
def test_round_trip_and_dtype(tmp_path: Path, vocab: int, dtype: type) -> None:
    docs = _docs(1, 40, vocab)
    with TokenShardWriter(tmp_path / "s", vocab) as writer:
        for doc in docs:
            writer.add(doc)
    shard = TokenShard(tmp_path / "s")
    assert shard.tokens.dtype == dtype
    assert shard.num_docs == len(docs)
    assert shard.num_tokens == sum(len(d) for d in docs)
    assert (tmp_path / "s.tok").stat().st_size == shard.num_tokens * np.dtype(dtype).itemsize
    for i, doc in enumerate(docs):
        np.testing.assert_array_equal(shard.document(i), doc)
    shard.verify()


def test_uncommitted_shard_is_invisible(tmp_path: Path) -> None:
    writer = TokenShardWriter(tmp_path / "a", 100)
    writer.add([1, 2, 3])
    with pytest.raises(NotFound):
        TokenShard(tmp_path / "a")
    writer.abort()
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(RuntimeError), TokenShardWriter(tmp_path / "b", 100) as failing:
        failing.add([4])
        raise RuntimeError("crash mid-write")
    assert list(tmp_path.iterdir()) == []


def test_dataset_rolls_shards_and_addresses_documents(tmp_path: Path) -> None:
    docs = _docs(2, 100, 1000)
    with TokenDatasetWriter(tmp_path, 1000, shard_tokens=300) as writer:
        for doc in docs:
            writer.add(doc)
    assert len(writer.shards) > 3
    dataset = TokenDataset(tmp_path)
    assert dataset.num_docs == 100
    np.testing.assert_array_equal(dataset.doc_lengths, [len(d) for d in docs])
    for i in (0, 37, 99):
        np.testing.assert_array_equal(dataset.document(i), docs[i])
    assert dataset.fingerprint == TokenDataset(tmp_path).fingerprint


def test_corrupt_tokens_detected(tmp_path: Path) -> None:
    with TokenShardWriter(tmp_path / "s", 100) as writer:
        writer.add([1, 2, 3, 4])
    raw = bytearray((tmp_path / "s.tok").read_bytes())
    raw[0] ^= 0xFF
    (tmp_path / "s.tok").write_bytes(bytes(raw))
    with pytest.raises(IntegrityError, match="SHA-256"):
        TokenShard(tmp_path / "s").verify()
    (tmp_path / "s.tok").write_bytes(bytes(raw[:4]))
    with pytest.raises(IntegrityError, match="expected 8 bytes"):
        TokenShard(tmp_path / "s")


def test_bad_input_rejected(tmp_path: Path) -> None:
    writer = TokenShardWriter(tmp_path / "s", 10)
    with pytest.raises(InvalidInput, match=r"\[0, 10\)"):
        writer.add([3, 10])
    with pytest.raises(InvalidInput, match="integer"):
        writer.add(np.array([1.5]))
    with pytest.raises(InvalidInput, match="vocab_size"):
        TokenShardWriter(tmp_path / "t", 0)
    (tmp_path / "x.idx").write_bytes(b"garbage")
    with pytest.raises(InvalidInput, match="not a Shipyard"):
        TokenShard(tmp_path / "x")


def test_offsets_out_of_order_rejected(tmp_path: Path) -> None:
    with TokenShardWriter(tmp_path / "s", 100) as writer:
        writer.add([1, 2, 3])
        writer.add([4])
        writer.add([5, 6])
    index = tmp_path / f"s{INDEX_SUFFIX}"
    raw = bytearray(index.read_bytes())
    # Offsets 0, 3, 4, 6: make the second one 5, past the third.
    raw[HEADER_SIZE + 8 : HEADER_SIZE + 16] = (5).to_bytes(8, "little")
    index.write_bytes(bytes(raw))
    with pytest.raises(InvalidInput, match=r"s\.idx: document offsets must start at 0, never fall"):
        TokenShard(tmp_path / "s")
