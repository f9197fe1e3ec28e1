"""Content-addressed pieces and manifests on top of a backend; every read is verified."""

from collections.abc import Iterator

from shipyard.errors import IntegrityError, InvalidInput, NotFound
from shipyard.hashing import sha256_hex
from shipyard.store.backend import Backend
from shipyard.store.manifest import HASH_HEX_LEN, Manifest

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
        if sha256_hex(data) != piece_hash:
            raise IntegrityError(f"piece {piece_hash} in {self.backend.uri} is corrupt")
        return data

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
