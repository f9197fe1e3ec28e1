"""Pieces written to disk as their bytes arrive, so that a transfer cut short (the sender died,
the daemon was killed) resumes at the byte where it stopped instead of at the piece's first.

A partial piece is a file under the store's hidden `.partial/` directory, named by the piece's
hash, written by one transfer at a time. Its bytes are unverified: the whole piece is checked
against its SHA-256 on `commit`, and only then moved into the store. A partial file therefore
needs no fsync: after a crash it can at worst hold bytes that fail the check, which costs one
whole refetch, never a bad piece. Receiving into a file also bounds a transfer's memory to one
`CHUNK`, whatever the piece size.

Where the store is not a local directory, or another transfer is writing the piece's partial
file (a hedged twin), the bytes are gathered in memory instead (`MemorySink`), as one piece.
"""

import hashlib
import os
import threading
from collections.abc import Callable, Collection
from typing import Protocol

from shipyard.errors import IntegrityError, StorageError
from shipyard.store.local import PARTIAL_DIR, LocalBackend, why
from shipyard.store.pieces import PieceStore, piece_key

CHUNK = 256 << 10  # bytes a transfer receives and writes at a time: at most this is lost to a kill


class SinkError(StorageError):
    """This host's own store could not take a piece's bytes (a full disk, a permission): not the
    sender's fault."""


class StalePartial(IntegrityError):
    """A resumed piece failed verification. Part of its bytes came from an earlier transfer, so
    the current sender is not to blame: the partial file is gone and the piece starts over."""


class PieceSink(Protocol):
    """Where one transfer's bytes of one piece go. `kept` bytes are held already: the offset to
    ask the sender for. `received` counts the bytes this transfer added."""

    kept: int
    received: int

    def write(self, data: memoryview) -> None: ...

    def restart(self) -> None:
        """Forget the kept bytes: the sender is sending the piece from its first byte."""
        ...

    def commit(self) -> None:
        """Verify the whole piece and store it; `IntegrityError` (`StalePartial` when resumed)
        if its bytes do not match the hash."""
        ...

    def close(self) -> None:
        """Let go of the sink; bytes not committed stay for a later transfer where they can."""
        ...


class MemorySink:
    """The piece gathered in memory, then stored through `put`, which checks the hash."""

    def __init__(self, store: PieceStore, piece_hash: str, size: int) -> None:
        self._store = store
        self._hash = piece_hash
        self._buffer = bytearray(size)
        self.kept = 0
        self.received = 0

    def write(self, data: memoryview) -> None:
        end = self.received + len(data)
        if end > len(self._buffer):
            raise IntegrityError(f"piece {self._hash[:16]}: more bytes than the manifest says")
        self._buffer[self.received : end] = data
        self.received = end

    def restart(self) -> None:
        self.received = 0

    def commit(self) -> None:
        if self.received != len(self._buffer):
            raise IntegrityError(f"piece {self._hash[:16]}: {self.received} bytes arrived")
        try:
            self._store.put_verified_piece(self._hash, memoryview(self._buffer))
        except StorageError as exc:
            raise SinkError(str(exc)) from exc

    def close(self) -> None:
        self._buffer = bytearray()


class PartialPiece:
    """A piece's partial file, open for appending. Opening it hashes the bytes already kept, so
    the digest is ready the moment the last byte lands."""

    def __init__(self, partials: "Partials", backend: LocalBackend, piece_hash: str, size: int):
        self._partials = partials
        self._backend = backend
        self._hash = piece_hash
        self._size = size
        self.path = backend.root / PARTIAL_DIR / piece_hash
        self._digest = hashlib.sha256()
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self.kept = self._hash_kept()
        except BaseException:
            os.close(self._fd)
            raise
        self.resumed = self.kept > 0
        self.received = 0

    def _hash_kept(self) -> int:
        kept = os.fstat(self._fd).st_size
        if kept > self._size:  # not this piece's bytes, whatever they are
            os.ftruncate(self._fd, 0)
            return 0
        offset = 0
        while offset < kept:
            data = os.pread(self._fd, min(CHUNK, kept - offset), offset)
            if not data:
                break  # truncated under us: keep what was read
            self._digest.update(data)
            offset += len(data)
        os.lseek(self._fd, offset, os.SEEK_SET)
        os.ftruncate(self._fd, offset)
        return offset

    @property
    def held(self) -> int:
        return self.kept + self.received

    def write(self, data: memoryview) -> None:
        if self.held + len(data) > self._size:
            raise IntegrityError(f"piece {self._hash[:16]}: more bytes than the manifest says")
        view = data
        try:
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as exc:
            raise SinkError(f"cannot write partial piece {self.path}: {why(exc)}") from exc
        self._digest.update(data)
        self.received += len(data)

    def restart(self) -> None:
        os.ftruncate(self._fd, 0)
        os.lseek(self._fd, 0, os.SEEK_SET)
        self._digest = hashlib.sha256()
        self.kept = self.received = 0
        self.resumed = False

    def commit(self) -> None:
        if self.held != self._size or self._digest.hexdigest() != self._hash:
            self._partials.discard(self._hash)
            kind = StalePartial if self.resumed else IntegrityError
            raise kind(f"piece {self._hash[:16]}: bytes do not match the hash")
        try:
            self._backend.put_file(piece_key(self._hash), self.path, self._fd)
        except StorageError as exc:
            raise SinkError(str(exc)) from exc

    def close(self) -> None:
        os.close(self._fd)
        # Empty, or stored by this transfer or a twin: nothing to resume.
        if not self.held or self._backend.stat(piece_key(self._hash)) is not None:
            self.path.unlink(missing_ok=True)
        self._partials.release(self._hash)


class Partials:
    """Where one store's transfers put their pieces: partial files when the store is a local
    directory, each written by one transfer at a time; memory for a hedged twin of a transfer
    that holds the file, and on other backends."""

    def __init__(self, store: PieceStore) -> None:
        self.store = store
        backend = store.backend
        self._local = backend if isinstance(backend, LocalBackend) else None
        self._open: set[str] = set()
        self._lock = threading.Lock()

    def open(self, piece_hash: str, size: int) -> PieceSink:
        if self._local is None:
            return MemorySink(self.store, piece_hash, size)
        with self._lock:
            if piece_hash in self._open:
                return MemorySink(self.store, piece_hash, size)
            self._open.add(piece_hash)
        try:
            (self._local.root / PARTIAL_DIR).mkdir(exist_ok=True)
            return PartialPiece(self, self._local, piece_hash, size)
        except OSError as exc:
            self.release(piece_hash)
            where = self._local.root / PARTIAL_DIR
            raise SinkError(f"cannot open a partial piece in {where}: {why(exc)}") from exc
        except BaseException:
            self.release(piece_hash)
            raise

    def receive(
        self,
        piece_hash: str,
        size: int,
        fetch: Callable[[PieceSink], None],
        held: Callable[[], bool],
    ) -> tuple[int, int]:
        """On a transfer thread: open the piece's sink (with the bytes a cut-short transfer
        kept), `fetch` the rest into it and commit it unless `held()` says a twin stored it
        first; return the bytes this transfer added and those it kept."""
        sink = self.open(piece_hash, size)
        try:
            if sink.kept < size:
                fetch(sink)
            if not held():
                sink.commit()
            return sink.received, sink.kept
        finally:
            sink.close()

    def release(self, piece_hash: str) -> None:
        with self._lock:
            self._open.discard(piece_hash)

    def discard(self, piece_hash: str) -> None:
        if self._local is not None:
            (self._local.root / PARTIAL_DIR / piece_hash).unlink(missing_ok=True)

    def sizes(self) -> dict[str, int]:
        """Bytes kept, by piece hash."""
        directory = self._local.root / PARTIAL_DIR if self._local else None
        if directory is None or not directory.is_dir():
            return {}
        return {entry.name: entry.stat().st_size for entry in os.scandir(directory)}

    def sweep(self, keep: Collection[str]) -> int:
        """Delete the partial files of pieces not in `keep` (held by now, or no longer
        wanted); return how many went."""
        gone = [name for name in self.sizes() if name not in keep]
        for name in gone:
            self.discard(name)
        return len(gone)
