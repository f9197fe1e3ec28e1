"""Signing keys: ed25519 or ECDSA P-256 key pairs as PEM files, and their fingerprints.

A private key is PKCS#8 PEM, unencrypted, written 0600 in a 0700 directory and read only through
`shipyard.secretfile`, which refuses it when anyone but its owner could read or replace it (the
rules tokens follow). A public key is SubjectPublicKeyInfo PEM, readable by anyone. A key's
fingerprint is `sha256:` and the hex SHA-256 of its DER SubjectPublicKeyInfo: what signatures
and trust policies name it by. P-256 keys are the ones OpenSSF model-signing also takes.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from shipyard.errors import InvalidInput, StorageError
from shipyard.hashing import sha256_hex
from shipyard.secretfile import read_private_file, write_private_file

Algorithm = Literal["ed25519", "ecdsa-p256"]
ALGORITHMS: tuple[Algorithm, ...] = ("ed25519", "ecdsa-p256")
MAX_KEY_FILE = 16 << 10  # a PEM key is a few hundred bytes
PublicKey = ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey
PrivateKey = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey


def fingerprint(public: PublicKey) -> str:
    der = public.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return f"sha256:{sha256_hex(der)}"


def algorithm_of(key: PublicKey) -> Algorithm:
    if isinstance(key, ed25519.Ed25519PublicKey):
        return "ed25519"
    return "ecdsa-p256"


def public_pem(public: PublicKey) -> bytes:
    return public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


@dataclass(frozen=True)
class SigningKey:
    """A private key with what signatures say about it."""

    private: PrivateKey

    @property
    def public(self) -> PublicKey:
        return self.private.public_key()

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.public)

    @property
    def algorithm(self) -> Algorithm:
        return algorithm_of(self.public)

    def sign(self, message: bytes) -> bytes:
        if isinstance(self.private, ed25519.Ed25519PrivateKey):
            return self.private.sign(message)
        return self.private.sign(message, ec.ECDSA(hashes.SHA256()))

    def private_pem(self) -> bytes:
        return self.private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )


def generate(algorithm: Algorithm) -> SigningKey:
    if algorithm == "ed25519":
        return SigningKey(ed25519.Ed25519PrivateKey.generate())
    return SigningKey(ec.generate_private_key(ec.SECP256R1()))


def write_key_pair(key: SigningKey, private_path: Path) -> Path:
    """Write the private key at `private_path` (0600) and the public one beside it as `.pub`;
    return the public key's path. An existing private key is never overwritten."""
    public_path = private_path.with_name(private_path.name + ".pub")
    if private_path.exists() or private_path.is_symlink():
        raise InvalidInput(f"key file {private_path} exists: choose another name")
    write_private_file(private_path, key.private_pem(), replace=False)
    try:
        public_path.write_bytes(public_pem(key.public))
    except OSError as exc:
        raise StorageError(f"cannot write public key {public_path}: {exc.strerror}") from None
    return public_path


def load_signing_key(path: Path) -> SigningKey:
    """The private key in `path`, refused unless only its owner can read and replace it."""
    data = read_private_file(path, "signing key", MAX_KEY_FILE)
    try:
        private = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise InvalidInput(
            f"signing key {path}: not an unencrypted PEM private key ({exc})"
        ) from None
    if isinstance(private, ed25519.Ed25519PrivateKey) or (
        isinstance(private, ec.EllipticCurvePrivateKey) and private.curve.name == "secp256r1"
    ):
        return SigningKey(private)
    raise InvalidInput(f"signing key {path}: only ed25519 and ECDSA P-256 keys are supported")


def parse_public_key(data: bytes, where: str) -> PublicKey:
    """A public key from PEM bytes; `InvalidInput` naming `where` for anything else."""
    try:
        public = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise InvalidInput(f"{where}: not a PEM public key ({exc})") from None
    if isinstance(public, ed25519.Ed25519PublicKey) or (
        isinstance(public, ec.EllipticCurvePublicKey) and public.curve.name == "secp256r1"
    ):
        return public
    raise InvalidInput(f"{where}: only ed25519 and ECDSA P-256 public keys are supported")


def load_public_key(path: Path) -> PublicKey:
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_KEY_FILE + 1)
    except OSError as exc:
        raise InvalidInput(f"public key {path}: cannot read ({exc.strerror})") from None
    if len(data) > MAX_KEY_FILE:
        raise InvalidInput(f"public key {path}: larger than {MAX_KEY_FILE} bytes")
    return parse_public_key(data, f"public key {path}")


def check_signature(public: PublicKey, signature: bytes, message: bytes) -> bool:
    """Whether `signature` is `public`'s over `message`."""
    try:
        if isinstance(public, ed25519.Ed25519PublicKey):
            public.verify(signature, message)
        else:
            public.verify(signature, message, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        return False
    return True
