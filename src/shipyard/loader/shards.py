"""Token shards: flat arrays of token ids plus a document-boundary index, memory-mapped.

A shard `<stem>` is two files (format version 1, documented in docs/formats.md):

- `<stem>.tok`: the token ids of every document back to back, little-endian, `uint16` when the
  vocabulary has at most 65,536 ids and `uint32` otherwise; no header, so it maps as one array.
- `<stem>.idx`: a 72-byte header (magic, version, bytes per token, vocabulary size, document
  count, token count, SHA-256 of the `.tok` file) followed by `num_docs + 1` little-endian
  `uint64` token offsets; document `i` is `tokens[offsets[i]:offsets[i + 1]]`.

A shard is committed when its `.idx` appears: both files are written under temp names, fsynced,
and the `.idx` is renamed into place last, so a reader never sees a half-written shard.
"""

import hashlib
import os
import struct
from array import array
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import numpy.typing as npt

from shipyard.durable import fsync_dir, temp_path, write_atomic, write_fd
from shipyard.errors import IntegrityError, InvalidInput, NotFound, StorageError

TOKEN_SHARD_VERSION = 1
MAGIC = b"SHYTOKS\x00"
TOKENS_SUFFIX = ".tok"
INDEX_SUFFIX = ".idx"
# magic, version, bytes per token, vocab size, docs, tokens, sha256 of the .tok file
_HEADER = struct.Struct("<8sIIQQQ32s")
HEADER_SIZE = _HEADER.size  # 72, a multiple of 8 so the offsets map aligned


def token_dtype(vocab_size: int) -> np.dtype[Any]:
    """The narrowest unsigned dtype that holds every id of a `vocab_size` vocabulary."""
    if not 1 <= vocab_size <= 2**32:
        raise InvalidInput(f"vocab_size must be in [1, 2**32], got {vocab_size}")
    return np.dtype("<u2") if vocab_size <= 2**16 else np.dtype("<u4")


@dataclass(frozen=True)
class ShardInfo:
    """What a committed shard holds; `sha256` is the digest of its `.tok` file."""

    stem: Path
    vocab_size: int
    num_docs: int
    num_tokens: int
    sha256: str


class TokenShardWriter:
    """Append documents (arrays of token ids) to one shard, then `commit` it atomically.

    Tokens stream to a temp file as they are added, so a shard larger than memory is fine. Used
    as a context manager it commits on success and leaves nothing behind on an exception.
    """

    def __init__(self, stem: str | Path, vocab_size: int) -> None:
        self.stem = Path(stem)
        self.vocab_size = vocab_size
        self.dtype = token_dtype(vocab_size)
        if not self.stem.parent.is_dir():
            raise InvalidInput(f"shard directory {self.stem.parent} does not exist")
        self._tok_final = self.stem.with_name(self.stem.name + TOKENS_SUFFIX)
        self._tok_tmp = temp_path(self._tok_final)
        self._fd: int | None = os.open(self._tok_tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        self._hash = hashlib.sha256()
        self._offsets = array("Q", [0])

    @property
    def num_docs(self) -> int:
        return len(self._offsets) - 1

    @property
    def num_tokens(self) -> int:
        return int(self._offsets[-1])

    def add(self, tokens: npt.ArrayLike) -> None:
        """Append one document; ids must be integers in `[0, vocab_size)`."""
        if self._fd is None:
            raise InvalidInput(f"shard {self.stem} is already committed or aborted")
        ids = np.asarray(tokens)
        if ids.ndim != 1 or not (ids.size == 0 or np.issubdtype(ids.dtype, np.integer)):
            raise InvalidInput(
                f"document {self.num_docs} of {self.stem}: expected a 1-D array of integer "
                f"token ids, got dtype {ids.dtype} with shape {ids.shape}"
            )
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= self.vocab_size):
            raise InvalidInput(
                f"document {self.num_docs} of {self.stem}: token ids must be in "
                f"[0, {self.vocab_size}), got range [{ids.min()}, {ids.max()}]"
            )
        data = np.ascontiguousarray(ids, dtype=self.dtype).data
        write_fd(self._fd, data)
        self._hash.update(data)
        self._offsets.append(self.num_tokens + int(ids.size))

    def commit(self) -> ShardInfo:
        """Make the shard durable and visible; returns what it holds."""
        if self._fd is None:
            raise InvalidInput(f"shard {self.stem} is already committed or aborted")
        fd, self._fd = self._fd, None
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        digest = self._hash.digest()
        header = _HEADER.pack(
            MAGIC,
            TOKEN_SHARD_VERSION,
            self.dtype.itemsize,
            self.vocab_size,
            self.num_docs,
            self.num_tokens,
            digest,
        )
        offsets = np.frombuffer(self._offsets, dtype=np.uint64).astype("<u8")
        os.replace(self._tok_tmp, self._tok_final)
        write_atomic(
            self.stem.with_name(self.stem.name + INDEX_SUFFIX),
            header + offsets.tobytes(),
            sync_dir=False,
        )
        fsync_dir(self.stem.parent)
        return ShardInfo(self.stem, self.vocab_size, self.num_docs, self.num_tokens, digest.hex())

    def abort(self) -> None:
        """Drop the shard: nothing of it stays on disk."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            self._tok_tmp.unlink(missing_ok=True)

    def __enter__(self) -> "TokenShardWriter":
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if kind is None:
            self.commit()
        else:
            self.abort()


@dataclass(frozen=True)
class _Index:
    vocab_size: int
    dtype: np.dtype[Any]
    num_tokens: int
    sha256: str
    offsets: npt.NDArray[np.uint64]


def _read_index(path: Path) -> _Index:
    """The `.idx` at `path`, every field checked: InvalidInput naming the file if one is wrong.

    The header is checked before the offsets are read, so a forged count cannot make the reader
    allocate more than the file holds; the offsets are checked because the loader copies
    documents by address.
    """
    try:
        with open(path, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            head = file.read(HEADER_SIZE)
            if len(head) < HEADER_SIZE or head[:8] != MAGIC:
                raise InvalidInput(f"{path} is not a Shipyard token-shard index")
            _, version, itemsize, vocab, docs, tokens, digest = _HEADER.unpack(head)
            if version != TOKEN_SHARD_VERSION:
                raise InvalidInput(
                    f"{path}: token-shard format version {version} is not supported "
                    f"(this reader knows version {TOKEN_SHARD_VERSION})"
                )
            if not 1 <= vocab <= 2**32:
                raise InvalidInput(f"{path}: vocab_size {vocab} is outside [1, 2**32]")
            dtype = token_dtype(vocab)
            if itemsize != dtype.itemsize:
                raise InvalidInput(
                    f"{path}: {itemsize} bytes per token, but ids of a {vocab}-id vocabulary "
                    f"take {dtype.itemsize}"
                )
            expected = HEADER_SIZE + 8 * (docs + 1)
            if size != expected:
                raise InvalidInput(
                    f"{path}: {size} bytes, but an index of {docs} documents has {expected}"
                )
            raw = file.read(expected - HEADER_SIZE)
    except OSError as exc:
        raise StorageError(f"cannot read token-shard index {path}: {exc.strerror}") from None
    if len(raw) != 8 * (docs + 1):
        raise InvalidInput(f"{path} changed while it was read")
    offsets: npt.NDArray[np.uint64] = np.frombuffer(raw, "<u8")
    if int(offsets[0]) != 0 or bool(np.any(offsets[1:] < offsets[:-1])) or offsets[-1] != tokens:
        raise InvalidInput(
            f"{path}: document offsets must start at 0, never fall and end at the "
            f"num_tokens of its header ({tokens})"
        )
    return _Index(vocab, dtype, tokens, digest.hex(), offsets)


class TokenShard:
    """A committed shard, memory-mapped read-only: `tokens` and `offsets` are numpy views."""

    def __init__(self, stem: str | Path) -> None:
        self.stem = Path(stem)
        idx_path = self.stem.with_name(self.stem.name + INDEX_SUFFIX)
        tok_path = self.stem.with_name(self.stem.name + TOKENS_SUFFIX)
        if not idx_path.is_file():
            raise NotFound(f"no committed token shard at {self.stem} ({idx_path.name} missing)")
        index = _read_index(idx_path)
        self.vocab_size: int = index.vocab_size
        self.dtype = index.dtype
        self.sha256: str = index.sha256
        self.offsets = index.offsets
        expected = index.num_tokens * self.dtype.itemsize
        size = tok_path.stat().st_size if tok_path.is_file() else -1
        if size != expected:
            raise IntegrityError(
                f"{tok_path}: expected {expected} bytes for {index.num_tokens} tokens, found "
                f"{max(size, 0)}"
            )
        self.tokens: npt.NDArray[Any] = (
            np.memmap(tok_path, dtype=self.dtype, mode="r").view(np.ndarray)
            if index.num_tokens
            else np.zeros(0, self.dtype)
        )

    @property
    def num_docs(self) -> int:
        return len(self.offsets) - 1

    @property
    def num_tokens(self) -> int:
        return int(self.offsets[-1])

    def doc_lengths(self) -> npt.NDArray[np.int64]:
        return np.diff(self.offsets).astype(np.int64)

    def document(self, i: int) -> npt.NDArray[Any]:
        if not 0 <= i < self.num_docs:
            raise InvalidInput(f"document {i} out of range for {self.stem} ({self.num_docs} docs)")
        return self.tokens[int(self.offsets[i]) : int(self.offsets[i + 1])]

    def verify(self) -> None:
        """Re-hash the token file against the digest in the index."""
        if hashlib.sha256(self.tokens.data).hexdigest() != self.sha256:
            raise IntegrityError(f"{self.stem}{TOKENS_SUFFIX}: SHA-256 does not match its index")

    def info(self) -> ShardInfo:
        return ShardInfo(self.stem, self.vocab_size, self.num_docs, self.num_tokens, self.sha256)
