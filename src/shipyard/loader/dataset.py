"""A token dataset: a directory of committed token shards, read in shard-name order.

`TokenDatasetWriter` rolls a new shard every `shard_tokens` tokens; parallel writers may instead
each write their own `TokenShardWriter` stems into one directory. Shards that are not committed
(no `.idx`) are invisible, so a crashed writer leaves the dataset readable.
"""

import bisect
import hashlib
from functools import cached_property
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import numpy.typing as npt

from shipyard.errors import InvalidInput, NotFound
from shipyard.loader.shards import INDEX_SUFFIX, ShardInfo, TokenShard, TokenShardWriter


class TokenDatasetWriter:
    """Append documents to `directory/<prefix>-NNNNN` shards of about `shard_tokens` tokens."""

    def __init__(
        self,
        directory: str | Path,
        vocab_size: int,
        *,
        shard_tokens: int = 1 << 26,
        prefix: str = "shard",
    ) -> None:
        if shard_tokens < 1:
            raise InvalidInput(f"shard_tokens must be >= 1, got {shard_tokens}")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.vocab_size = vocab_size
        self.shard_tokens = shard_tokens
        self.prefix = prefix
        self.shards: list[ShardInfo] = []
        self._current: TokenShardWriter | None = None

    def add(self, tokens: npt.ArrayLike) -> None:
        if self._current is None:
            stem = self.directory / f"{self.prefix}-{len(self.shards):05d}"
            self._current = TokenShardWriter(stem, self.vocab_size)
        self._current.add(tokens)
        if self._current.num_tokens >= self.shard_tokens:
            self._roll()

    def _roll(self) -> None:
        if self._current is not None:
            self.shards.append(self._current.commit())
            self._current = None

    def close(self) -> list[ShardInfo]:
        """Commit the last shard; returns every shard written."""
        self._roll()
        return self.shards

    def __enter__(self) -> "TokenDatasetWriter":
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if kind is None:
            self.close()
        elif self._current is not None:
            self._current.abort()


class TokenDataset:
    """Every committed shard of a directory, addressed by global document number."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise NotFound(f"token dataset directory {self.directory} does not exist")
        stems = sorted(p.with_suffix("") for p in self.directory.glob(f"*{INDEX_SUFFIX}"))
        if not stems:
            raise NotFound(f"no committed token shards in {self.directory}")
        self.shards = [TokenShard(stem) for stem in stems]
        vocabs = {shard.vocab_size for shard in self.shards}
        if len(vocabs) != 1:
            raise InvalidInput(f"{self.directory}: shards disagree on vocab_size: {sorted(vocabs)}")
        self.vocab_size = vocabs.pop()
        # First global document number of each shard, for document lookups.
        self._doc_starts = np.cumsum([0] + [s.num_docs for s in self.shards]).tolist()

    @property
    def num_docs(self) -> int:
        return int(self._doc_starts[-1])

    @property
    def num_tokens(self) -> int:
        return sum(shard.num_tokens for shard in self.shards)

    @cached_property
    def doc_lengths(self) -> npt.NDArray[np.int64]:
        return np.concatenate([shard.doc_lengths() for shard in self.shards])

    @cached_property
    def fingerprint(self) -> str:
        """SHA-256 over the shard names and token digests: names what was sampled from."""
        h = hashlib.sha256()
        for shard in self.shards:
            h.update(f"{shard.stem.name}:{shard.num_docs}:{shard.sha256}\n".encode())
        return h.hexdigest()

    def locate(self, doc: int) -> tuple[TokenShard, int]:
        """The shard that holds global document `doc`, and its number within that shard."""
        if not 0 <= doc < self.num_docs:
            raise InvalidInput(f"document {doc} out of range ({self.num_docs} documents)")
        i = bisect.bisect_right(self._doc_starts, doc) - 1
        return self.shards[i], doc - int(self._doc_starts[i])

    def document(self, doc: int) -> npt.NDArray[Any]:
        shard, local = self.locate(doc)
        return shard.document(local)

    def verify(self) -> None:
        for shard in self.shards:
            shard.verify()
