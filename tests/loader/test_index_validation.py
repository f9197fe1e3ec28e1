"""A token-shard index read from disk is checked field by field before any token is read.

Each case damages one field of a real `.idx`; opening the shard (and `shipyard tokens inspect`)
must refuse it with InvalidInput (exit 2) naming the file, never a traceback or a read outside
the `.tok` file.
"""

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from shipyard.errors import IntegrityError, InvalidInput
from shipyard.loader import TokenDataset, TokenShard, TokenShardWriter
from shipyard.loader.shards import HEADER_SIZE, INDEX_SUFFIX, TOKENS_SUFFIX

HEADER = struct.Struct("<8sIIQQQ32s")  # docs/formats.md: the layout, restated independently
FIELDS = ("magic", "version", "itemsize", "vocab", "docs", "tokens", "digest")


def _shard(directory: Path) -> Path:
    """A shard of vocabulary 100 with documents of 3, 1 and 2 tokens; returns its stem."""
    with TokenShardWriter(directory / "s", 100) as writer:
        for doc in ([1, 2, 3], [4], [5, 6]):
            writer.add(doc)
    return directory / "s"


def _with(stem: Path, offsets: list[int] | None = None, **fields: object) -> bytes:
    raw = (stem.parent / (stem.name + INDEX_SUFFIX)).read_bytes()
    header = dict(zip(FIELDS, HEADER.unpack_from(raw), strict=True))
    header.update(fields)
    tail = raw[HEADER_SIZE:] if offsets is None else struct.pack(f"<{len(offsets)}Q", *offsets)
    return HEADER.pack(*header.values()) + tail


CASES = {
    "bad magic": ({"magic": b"SHYTOKS\x01"}, None, "not a Shipyard token-shard index"),
    "unknown version": ({"version": 2}, None, "version 2 is not supported"),
    "vocab of zero": ({"vocab": 0}, None, "vocab_size 0 is outside"),
    "vocab too large": ({"vocab": 2**32 + 1}, None, "is outside [1, 2**32]"),
    "wrong bytes per token": ({"itemsize": 8}, None, "8 bytes per token"),
    "huge document count": ({"docs": 2**64 - 1}, None, "an index of 18446744073709551615 doc"),
    "fewer documents": ({"docs": 2}, None, "an index of 2 documents"),
    "token count disagrees": ({"tokens": 7}, None, "end at the num_tokens of its header (7)"),
    "first offset not 0": ({}, [1, 3, 4, 6], "must start at 0"),
    "falling offsets": ({}, [0, 5, 4, 6], "never fall"),
    "offset past the data": ({}, [0, 3, 4, 2**63], "end at the num_tokens"),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_each_index_field_is_checked(tmp_path: Path, case: str) -> None:
    fields, offsets, message = CASES[case]
    stem = _shard(tmp_path)
    index = tmp_path / f"s{INDEX_SUFFIX}"
    index.write_bytes(_with(stem, offsets, **fields))
    with pytest.raises(InvalidInput) as caught:
        TokenShard(stem)
    assert str(caught.value).startswith(f"{index}") and message in str(caught.value)


@pytest.mark.parametrize("size", [0, 7, HEADER_SIZE - 1, HEADER_SIZE, HEADER_SIZE + 9])
def test_truncated_index_is_refused(tmp_path: Path, size: int) -> None:
    stem = _shard(tmp_path)
    index = tmp_path / f"s{INDEX_SUFFIX}"
    index.write_bytes(index.read_bytes()[:size])
    with pytest.raises(InvalidInput, match=str(index)):
        TokenShard(stem)


def test_short_token_file_is_an_integrity_error(tmp_path: Path) -> None:
    stem = _shard(tmp_path)
    tokens = tmp_path / f"s{TOKENS_SUFFIX}"
    tokens.write_bytes(tokens.read_bytes()[:-2])
    with pytest.raises(IntegrityError, match=f"{tokens}: expected 12 bytes for 6 tokens, found 10"):
        TokenShard(stem)


def _inspect(directory: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "shipyard", "tokens", "inspect", str(directory)]
    return subprocess.run(command, capture_output=True, text=True, env=env)


def test_tokens_inspect_exit_codes(tmp_path: Path) -> None:
    stem = _shard(tmp_path)
    assert _inspect(tmp_path).returncode == 0
    assert TokenDataset(tmp_path).num_tokens == 6
    index = tmp_path / f"s{INDEX_SUFFIX}"
    good = index.read_bytes()
    index.write_bytes(_with(stem, [0, 3, 4, 2**63]))
    corrupt = _inspect(tmp_path)
    assert corrupt.returncode == 2, corrupt.stderr
    assert f"{index}: document offsets" in corrupt.stderr and "Traceback" not in corrupt.stderr
    index.write_bytes(good)
    (tmp_path / f"s{TOKENS_SUFFIX}").write_bytes(b"")
    assert _inspect(tmp_path).returncode == 5
    assert _inspect(tmp_path / "missing").returncode == 4
