"""Encryption at rest for confidential artifacts: the keys, and sealing and opening pieces.

Each piece is encrypted with AES-256-GCM under a fresh random 96-bit nonce; the store, S3 and P2P
peers hold only the ciphertext, which is as long as the plaintext and addressed by its SHA-256 like
any piece, so a host without the key still verifies, serves and relays it. The nonce and the GCM
tag go in the manifest (`seals`), and each piece's associated data names the artifact's random
salt, the file's path and size, and the piece's index, offset and size: a piece moved to another
place, file or artifact fails its tag. A last tag, under a nonce of its own, covers the whole
manifest, so without the key nobody can drop, rename or reorder files, or edit a confidential
artifact's metadata, unnoticed.

Keys are 32 random bytes, written as base64, one per line in a key file (`--key-file` or
`SHIPYARD_KEY_FILE`, read with the rules of every secret file: see `secretfile`) or
comma-separated in `SHIPYARD_ENCRYPTION_KEY`. The first key seals new artifacts; every key listed
opens the artifacts it sealed, which is how a key is rotated. A manifest names its key by id, a
fingerprint of it, never the key.
"""

import base64
import binascii
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from shipyard.errors import IntegrityError, InvalidInput, KeyUnavailable
from shipyard.hashing import canonical_json, sha256_hex
from shipyard.secretfile import read_private_file
from shipyard.store.manifest import (
    KEY_ID_HEX_LEN,
    NONCE_HEX_LEN,
    SALT_HEX_LEN,
    TAG_HEX_LEN,
    Encryption,
    FileEntry,
    Manifest,
    PieceRef,
    PieceSeal,
)
from shipyard.store.pieces import PieceStore, pwrite_all

KEY_BYTES = 32
KEY_FILE_ENV = "SHIPYARD_KEY_FILE"
KEY_ENV = "SHIPYARD_ENCRYPTION_KEY"
MAX_KEY_FILE = 64 << 10
OWNER_ONLY = 0o700  # the mode bits a file decrypted from a confidential artifact may keep
_TAG_BYTES = TAG_HEX_LEN // 2
_KEY_ID_CONTEXT = b"shipyard encryption key id\x00"


def key_id(key: bytes) -> str:
    """The key's public name: a truncated SHA-256 of it under a fixed context."""
    return sha256_hex(_KEY_ID_CONTEXT + key)[:KEY_ID_HEX_LEN]


def new_key() -> str:
    """A fresh key, as a key file's line says it."""
    return base64.b64encode(os.urandom(KEY_BYTES)).decode()


@dataclass(frozen=True)
class Keyring:
    """The keys this process holds, in order (the first seals), and where they came from."""

    keys: tuple[bytes, ...]
    source: str

    @property
    def ids(self) -> list[str]:
        return [key_id(key) for key in self.keys]

    def sealer(self) -> "Sealer":
        """A sealer for one new artifact, under the first key."""
        if not self.keys:
            raise KeyUnavailable(
                f"a confidential artifact needs a key: give --key-file, or set {KEY_FILE_ENV} "
                f"or {KEY_ENV} (base64 of {KEY_BYTES} random bytes)"
            )
        return Sealer(self.keys[0])

    def opener(self, manifest: Manifest) -> "Opener":
        """What decrypts `manifest`'s pieces; refuses a key it lacks or a manifest whose tag
        fails, before anything is read."""
        header = manifest.encryption
        if header is None:
            raise InvalidInput(f"artifact {manifest.id} is not encrypted")
        for key in self.keys:
            if key_id(key) == header.key_id:
                return Opener(key, manifest)
        held = f"{self.source} holds key(s) {', '.join(self.ids)}" if self.keys else "no key given"
        raise KeyUnavailable(
            f"artifact {manifest.id} is encrypted with key {header.key_id}, which this process "
            f"does not hold ({held}; give --key-file, or set {KEY_FILE_ENV} or {KEY_ENV})"
        )


def load_keyring(key_file: Path | None = None, environ: Mapping[str, str] | None = None) -> Keyring:
    """The keys of `key_file`, else of the file `SHIPYARD_KEY_FILE` names, else of
    `SHIPYARD_ENCRYPTION_KEY`; an empty keyring when none is set."""
    env = os.environ if environ is None else environ
    if key_file is None and env.get(KEY_FILE_ENV):
        key_file = Path(env[KEY_FILE_ENV])
    if key_file is not None:
        where = f"encryption key file {key_file}"
        data = read_private_file(key_file, "encryption key file", MAX_KEY_FILE + 1)
        if len(data) > MAX_KEY_FILE:  # cut short, its last line could read as another key
            raise InvalidInput(f"{where} is larger than {MAX_KEY_FILE} bytes")
        return Keyring(_parse_keys(data, where), where)
    if env.get(KEY_ENV):
        text = env[KEY_ENV].replace(",", "\n")
        return Keyring(_parse_keys(text.encode(), KEY_ENV, item="key"), KEY_ENV)
    return Keyring((), "")


def _parse_keys(data: bytes, where: str, item: str = "line") -> tuple[bytes, ...]:
    """Keys, one base64 line each; blank lines and `#` comments skipped. Messages name the line,
    never its content: it is a key, or close to one."""
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise InvalidInput(f"{where}: not ASCII (base64 keys, one per line)") from None
    keys: list[bytes] = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            key = base64.b64decode(line, validate=True)
        except binascii.Error:
            raise InvalidInput(f"{where}: {item} {number} is not base64") from None
        if len(key) != KEY_BYTES:
            raise InvalidInput(
                f"{where}: {item} {number} decodes to {len(key)} bytes; a key is {KEY_BYTES}"
            )
        if key not in keys:
            keys.append(key)
    if not keys:
        raise InvalidInput(f"{where} holds no key")
    return tuple(keys)


class Sealer:
    """Encrypts the pieces of one new artifact and authenticates its manifest."""

    def __init__(self, key: bytes) -> None:
        self._aead = AESGCM(key)
        self._buffers = _Buffers()
        self.header = Encryption(
            key_id=key_id(key),
            salt=os.urandom(SALT_HEX_LEN // 2).hex(),
            nonce=os.urandom(NONCE_HEX_LEN // 2).hex(),
            tag="0" * TAG_HEX_LEN,  # set by `seal_manifest`, over everything else
        )

    @contextmanager
    def seal_piece(
        self, data: memoryview, *, path: str, index: int, offset: int, file_size: int
    ) -> Iterator[tuple[memoryview, PieceSeal]]:
        """The ciphertext to store (as long as `data`), valid inside the block, and the seal
        the manifest keeps."""
        nonce = os.urandom(NONCE_HEX_LEN // 2)
        aad = _piece_aad(self.header.salt, path, file_size, index, offset, len(data))
        size = len(data)
        with self._buffers.lend(size + _TAG_BYTES) as sealed:
            self._aead.encrypt_into(nonce, data, aad, sealed)
            yield sealed[:size], PieceSeal(nonce.hex(), bytes(sealed[size:]).hex())

    def piece_sealer(
        self, path: str, index: int, offset: int, file_size: int
    ) -> Callable[[memoryview], AbstractContextManager[tuple[memoryview, PieceSeal]]]:
        """`seal_piece` for the piece at this place, to run on a worker thread."""
        return lambda data: self.seal_piece(
            data, path=path, index=index, offset=offset, file_size=file_size
        )

    def seal_manifest(self, manifest: Manifest) -> Manifest:
        """`manifest` (built with `self.header`) with the tag that authenticates all of it."""
        nonce = bytes.fromhex(self.header.nonce)
        tag = self._aead.encrypt(nonce, b"", _manifest_aad(manifest))
        return replace(manifest, encryption=replace(self.header, tag=tag.hex()))


class Opener:
    """Decrypts the pieces of one confidential artifact, whose manifest it has authenticated."""

    def __init__(self, key: bytes, manifest: Manifest) -> None:
        header = manifest.encryption
        assert header is not None  # `Keyring.opener` checked
        self._aead = AESGCM(key)
        self._salt = header.salt
        self.key_id = header.key_id
        self._buffers = _Buffers()
        try:
            self._aead.decrypt(
                bytes.fromhex(header.nonce), bytes.fromhex(header.tag), _manifest_aad(manifest)
            )
        except InvalidTag:
            raise IntegrityError(
                f"artifact {manifest.id}: its manifest fails its tag under key {self.key_id}: "
                "it was altered, or sealed by another key"
            ) from None

    def placer(self, pieces: PieceStore, entry: FileEntry, fd: int) -> Callable[[PieceRef], None]:
        """Writes a piece of `entry` as plaintext into `fd`. Its GCM tag, which the manifest's
        own tag vouches for, authenticates it, so no SHA-256 pass is needed; when the tag fails,
        the hash tells a corrupt piece from one that was moved."""
        indices = {ref.offset: index for index, ref in enumerate(entry.pieces)}
        assert entry.seals is not None  # manifest validation: one seal per piece
        seals = entry.seals

        def place(ref: PieceRef) -> None:
            index = indices[ref.offset]
            with (
                self._buffers.lend(ref.size + _TAG_BYTES) as sealed,
                self._buffers.lend(ref.size) as plain,
            ):
                pieces.read_piece_into(ref, sealed[: ref.size])
                sealed[ref.size :] = bytes.fromhex(seals[index].tag)
                aad = _piece_aad(self._salt, entry.path, entry.size, index, ref.offset, ref.size)
                try:
                    self._aead.decrypt_into(bytes.fromhex(seals[index].nonce), sealed, aad, plain)
                except InvalidTag:
                    pieces.check_piece(ref.hash, sealed[: ref.size])
                    raise IntegrityError(
                        f"does not decrypt under key {self.key_id}: its tag fails (altered, or "
                        "moved from another place, file or artifact)"
                    ) from None
                pwrite_all(fd, plain, ref.offset)

        return place


class _Buffers:
    """Piece-sized buffers lent to worker threads and reused: about one per thread in all, so no
    piece costs an allocation (and the page faults of a fresh one)."""

    def __init__(self) -> None:
        self._spare: list[bytearray] = []  # list.pop and list.append are thread-safe

    @contextmanager
    def lend(self, size: int) -> Iterator[memoryview]:
        try:
            buffer = self._spare.pop()
        except IndexError:
            buffer = bytearray()
        if len(buffer) < size:
            buffer = bytearray(size)
        try:
            with memoryview(buffer)[:size] as view:
                yield view
        finally:
            self._spare.append(buffer)


def open_sealed(manifest: Manifest, keys: Keyring | None) -> Opener | None:
    """The opener a confidential manifest needs (keys from the environment unless given); None
    for a plain one."""
    if manifest.encryption is None:
        return None
    return (keys if keys is not None else load_keyring()).opener(manifest)


def _piece_aad(salt: str, path: str, file_size: int, index: int, offset: int, size: int) -> bytes:
    return canonical_json(["shipyard-piece", salt, path, file_size, index, offset, size])


def _manifest_aad(manifest: Manifest) -> bytes:
    raw = manifest.to_json()
    raw["encryption"] = {k: v for k, v in raw["encryption"].items() if k != "tag"}
    return canonical_json(["shipyard-manifest", raw])
