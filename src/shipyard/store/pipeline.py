"""Overlap hashing and storage I/O with reading, on worker threads.

hashlib and file or network I/O release the GIL, so hashing one piece, fsyncing another and
reading a third run on different cores at once; S3 puts and gets go out in parallel.
"""

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import TypeVar

from shipyard.store.manifest import PieceSeal
from shipyard.store.pieces import PieceStore

K = TypeVar("K")
T = TypeVar("T")
# Encrypts a piece on the worker thread: the ciphertext to store (valid inside the block), and
# its seal.
Seal = Callable[[memoryview], AbstractContextManager[tuple[memoryview, PieceSeal]]]

PIPELINE_DEPTH = 4  # pieces in flight; memory used is about (depth + 1) × piece size


class PieceWriter:
    """Stores pieces from a ring of reusable buffers: fill `buffer()`, then `submit` it."""

    def __init__(self, pieces: PieceStore, piece_size: int, depth: int = PIPELINE_DEPTH) -> None:
        self._pieces = pieces
        self._pool = ThreadPoolExecutor(max_workers=depth, thread_name_prefix="shipyard-put")
        self._buffers = [memoryview(bytearray(piece_size)) for _ in range(depth + 1)]
        self._in_flight: deque[Future[tuple[str, PieceSeal | None]]] = deque()
        self._submitted = 0

    def buffer(self) -> memoryview:
        """The next free buffer. The last `depth` submissions may still be in flight, each in
        its own buffer, so the one after them is free once the oldest beyond that finishes."""
        while len(self._in_flight) >= len(self._buffers) - 1:
            self._in_flight.popleft().result()
        return self._buffers[self._submitted % len(self._buffers)]

    def submit(
        self, data: memoryview, seal: Seal | None = None
    ) -> "Future[tuple[str, PieceSeal | None]]":
        """Hash and store `data` (a prefix of the last `buffer()`), encrypted by `seal` if given;
        the future gives the stored piece's hash and its seal."""
        future = self._pool.submit(self._store, data, seal)
        self._in_flight.append(future)
        self._submitted += 1
        return future

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _store(self, data: memoryview, seal: Seal | None) -> tuple[str, PieceSeal | None]:
        if seal is None:
            return self._pieces.put_piece(data)[0], None
        with seal(data) as (ciphertext, piece_seal):
            return self._pieces.put_piece(ciphertext)[0], piece_seal


def fetch_in_order(
    fetch: Callable[[K], T], keys: Iterable[K], depth: int = PIPELINE_DEPTH
) -> Iterator[T]:
    """`fetch(key)` for each key, up to `depth` ahead on worker threads, yielded in order."""
    with ThreadPoolExecutor(max_workers=depth, thread_name_prefix="shipyard-get") as pool:
        ahead: deque[Future[T]] = deque()
        try:
            for key in keys:
                ahead.append(pool.submit(fetch, key))
                if len(ahead) > depth:
                    yield ahead.popleft().result()
            while ahead:
                yield ahead.popleft().result()
        finally:
            for future in ahead:
                future.cancel()
