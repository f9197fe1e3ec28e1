"""Property: whatever bytes a token-shard index holds, opening and reading it raise only Shipyard
errors, and an index that opens never points outside its `.tok` file."""

import struct
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shipyard.errors import ShipyardError
from shipyard.loader import TokenShard, TokenShardWriter
from shipyard.loader.shards import HEADER_SIZE, INDEX_SUFFIX, MAGIC, TOKENS_SUFFIX

pytestmark = pytest.mark.fuzz

HEADER = struct.Struct("<8sIIQQQ32s")
u64 = st.integers(0, 2**64 - 1) | st.integers(0, 16)
u32 = st.integers(0, 2**32 - 1) | st.sampled_from([1, 2, 4])


def _open(index: bytes, tokens: bytes) -> None:
    """Write a shard of these bytes; if it opens, read every document of it."""
    with tempfile.TemporaryDirectory() as scratch:
        stem = Path(scratch) / "s"
        (Path(scratch) / f"s{INDEX_SUFFIX}").write_bytes(index)
        (Path(scratch) / f"s{TOKENS_SUFFIX}").write_bytes(tokens)
        try:
            shard = TokenShard(stem)
            assert shard.num_tokens * shard.dtype.itemsize == len(tokens)
            assert int(shard.doc_lengths().sum()) == shard.num_tokens
            for i in range(min(shard.num_docs, 50)):
                assert shard.document(i).size == shard.doc_lengths()[i]
            shard.verify()
        except ShipyardError:
            pass


@given(
    index=st.binary(max_size=200) | st.binary(max_size=200).map(MAGIC.__add__),
    tokens=st.binary(max_size=64),
)
def test_random_bytes(index: bytes, tokens: bytes) -> None:
    _open(index, tokens)


@given(
    version=st.sampled_from([1]) | u32,
    itemsize=u32,
    vocab=st.sampled_from([1, 100, 2**16, 2**16 + 1, 2**32]) | u64,
    docs=u64,
    num_tokens=u64,
    offsets=st.lists(u64, max_size=8),
    tokens=st.binary(max_size=64),
)
def test_random_header_fields(
    version: int,
    itemsize: int,
    vocab: int,
    docs: int,
    num_tokens: int,
    offsets: list[int],
    tokens: bytes,
) -> None:
    header = HEADER.pack(MAGIC, version, itemsize, vocab, docs, num_tokens, bytes(32))
    _open(header + struct.pack(f"<{len(offsets)}Q", *offsets), tokens)


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, bytes]:
    directory = tmp_path_factory.mktemp("shard")
    rng = np.random.default_rng(0)
    with TokenShardWriter(directory / "s", 300) as writer:
        for _ in range(6):
            writer.add(rng.integers(0, 300, size=int(rng.integers(0, 9))))
    return (directory / "s.idx").read_bytes(), (directory / "s.tok").read_bytes()


@given(data=st.data())
def test_damaged_real_index(real: tuple[bytes, bytes], data: st.DataObject) -> None:
    index, tokens = bytearray(real[0]), real[1]
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(index) - 1))
        if data.draw(st.booleans()) and at >= HEADER_SIZE:  # a whole offset, rewritten
            at -= (at - HEADER_SIZE) % 8
            index[at : at + 8] = data.draw(u64).to_bytes(8, "little")
        else:
            index[at : at + data.draw(st.integers(0, 4))] = data.draw(st.binary(max_size=4))
    _open(bytes(index), tokens)
