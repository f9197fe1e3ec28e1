"""Content-addressed pieces and manifests on top of a backend; every read is verified."""

import mmap
import os
from collections.abc import Iterator

from shipyard.errors import IntegrityError, InvalidInput, NotFound
from shipyard.hashing import sha256_hex
from shipyard.store.backend import Backend
from shipyard.store.local import LocalBackend
from shipyard.store.manifest import HASH_HEX_LEN, Manifest, PieceRef

PIECES = "pieces/"
MANIFESTS = "manifests/"


def piece_key(piece_hash: str) -> str:
    # Two hex digits of fan-out keep directory sizes small on local disks.
    return f"{PIECES}{piece_hash[:2]}/{piece_hash}"


def manifest_key(artifact_id: str) -> str:
    return f"{MANIFESTS}{artifact_id}"


class PieceStore:
    """Puts and gets pieces and manifests by SHA-256, refusing bytes that do not match."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def has_piece(self, piece_hash: str) -> bool:
        return self.backend.stat(piece_key(piece_hash)) is not None

    def put_piece(self, data: bytes | memoryview) -> tuple[str, bool]:
        """Store `data` unless a piece with its hash exists; return (hash, written)."""
        piece_hash = sha256_hex(data)
        if self.has_piece(piece_hash):
            return piece_hash, False
        self.backend.put(piece_key(piece_hash), data)
        return piece_hash, True

    def put_verified_piece(self, piece_hash: str, data: bytes | memoryview) -> None:
        """Store bytes that the caller claims hash to `piece_hash`, checking the claim first."""
        if sha256_hex(data) != piece_hash:
            raise IntegrityError(f"piece {piece_hash[:16]}: bytes do not match the hash")
        if not self.has_piece(piece_hash):
            self.backend.put(piece_key(piece_hash), data)

    def get_piece(self, piece_hash: str) -> bytes:
        """The piece's bytes; `IntegrityError` if they are missing or do not match the hash."""
        try:
            data = self.backend.get(piece_key(piece_hash))
        except NotFound:
            raise IntegrityError(f"piece {piece_hash} is missing from {self.backend.uri}") from None
        self.check_piece(piece_hash, data)
        return data

    def check_piece(self, piece_hash: str, data: bytes | memoryview) -> None:
        """`IntegrityError` unless `data` hashes to `piece_hash`."""
        if sha256_hex(data) != piece_hash:
            raise IntegrityError(f"piece {piece_hash} in {self.backend.uri} is corrupt")

    def read_piece_into(self, ref: PieceRef, view: memoryview) -> None:
        """Fill `view` (`ref.size` bytes) with the piece, NOT verified: for a caller that
        authenticates it another way (a GCM tag) and calls `check_piece` when that fails. On a
        local store the file is read straight into `view`, with no intermediate copy."""
        if not isinstance(self.backend, LocalBackend):
            try:
                data = self.backend.get(piece_key(ref.hash))
            except NotFound:
                raise IntegrityError(
                    f"piece {ref.hash} is missing from {self.backend.uri}"
                ) from None
            _check_size(ref, len(data))
            view[:] = data
            return
        source = self._open_local(ref)
        try:
            done = 0
            while done < ref.size:
                n = os.preadv(source, [view[done:]], done)
                if n == 0:
                    raise IntegrityError(f"piece {ref.hash} shrank while it was read")
                done += n
        finally:
            os.close(source)

    def copy_piece(self, ref: PieceRef, fd: int) -> None:
        """Write the verified piece into file `fd` at `ref.offset`.

        On a local store the piece is hashed through a memory map and copied file to file in the
        kernel, like `cp`: no copy through Python. Elsewhere it is fetched, verified and written.
        """
        if not isinstance(self.backend, LocalBackend):
            data = self.get_piece(ref.hash)
            _check_size(ref, len(data))
            pwrite_all(fd, data, ref.offset)
            return
        source = self._open_local(ref)
        try:
            with (
                mmap.mmap(source, ref.size, prot=mmap.PROT_READ) as mapped,
                memoryview(mapped) as view,
            ):
                intact = sha256_hex(view) == ref.hash
            if not intact:
                raise IntegrityError(f"piece {ref.hash} in {self.backend.uri} is corrupt")
            copied = 0
            while copied < ref.size:
                n = os.copy_file_range(source, fd, ref.size - copied, copied, ref.offset + copied)
                if n == 0:
                    raise IntegrityError(f"piece {ref.hash} shrank while it was copied")
                copied += n
        finally:
            os.close(source)

    def _open_local(self, ref: PieceRef) -> int:
        """A descriptor of the local piece file, its size checked against `ref`."""
        assert isinstance(self.backend, LocalBackend)
        try:
            source = os.open(self.backend.path(piece_key(ref.hash)), os.O_RDONLY)
        except FileNotFoundError:
            raise IntegrityError(f"piece {ref.hash} is missing from {self.backend.uri}") from None
        try:
            _check_size(ref, os.fstat(source).st_size)
        except BaseException:
            os.close(source)
            raise
        return source

    def put_manifest(self, manifest: Manifest) -> str:
        artifact_id = manifest.id
        key = manifest_key(artifact_id)
        if self.backend.stat(key) is None:
            self.backend.put(key, manifest.canonical_bytes())
        return artifact_id

    def has_manifest(self, artifact_id: str) -> bool:
        return self.backend.stat(manifest_key(artifact_id)) is not None

    def get_manifest(self, artifact_id: str) -> Manifest:
        if len(artifact_id) != HASH_HEX_LEN:
            raise InvalidInput(f"{artifact_id!r} is not a full artifact id (64 hex digits)")
        try:
            data = self.backend.get(manifest_key(artifact_id))
        except NotFound:
            raise NotFound(
                f"artifact {artifact_id} has no manifest in {self.backend.uri}"
            ) from None
        return self.parse_manifest(artifact_id, data)

    @staticmethod
    def parse_manifest(artifact_id: str, data: bytes) -> Manifest:
        """Parse manifest bytes that claim to be `artifact_id`, refusing them if they are not."""
        if sha256_hex(data) != artifact_id:
            raise IntegrityError(f"manifest of {artifact_id}: bytes do not match the artifact id")
        return Manifest.from_bytes(data, where=f"manifest {artifact_id[:16]}")

    def manifest_ids(self) -> Iterator[str]:
        for info in self.backend.list(MANIFESTS):
            yield info.key[len(MANIFESTS) :]


def _check_size(ref: PieceRef, size: int) -> None:
    if size != ref.size:
        raise IntegrityError(f"piece {ref.hash} has {size} bytes, the manifest says {ref.size}")


def pwrite_all(fd: int, data: bytes | memoryview, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written
