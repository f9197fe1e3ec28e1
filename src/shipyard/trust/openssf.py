"""OpenSSF model-signing interop: sign and verify a model directory in its format, with keys.

The format is model-signing's own (a Sigstore bundle holding a DSSE envelope over an in-toto
statement of every file's SHA-256), made and checked by the `model_signing` library itself, key
based only: no Sigstore, no network. A directory Shipyard signs verifies with `model_signing
verify key`, and one signed by `model_signing sign key` verifies here. The keys are the ECDSA
P-256 pairs `shipyard trust keygen --algorithm ecdsa-p256` makes; the private key is read through
the same permission checks as every other key, then handed to the library in memory.
"""

import os
from pathlib import Path
from typing import Any

from shipyard.errors import InvalidInput, Untrusted
from shipyard.trust.keys import load_public_key, load_signing_key

DEFAULT_SIGNATURE = "model.sig"


def _signature_path(directory: Path, signature: Path | None) -> Path:
    if not directory.is_dir():
        raise InvalidInput(f"{directory}: not a directory")
    return signature or directory / DEFAULT_SIGNATURE


def _ignored(directory: Path, signature: Path) -> list[Path]:
    """The signature file, when it lies inside the model directory, is not part of the model."""
    try:
        return [signature.resolve().relative_to(directory.resolve())]
    except ValueError:
        return []


def _library() -> Any:
    try:
        import model_signing
    except ImportError:
        raise InvalidInput(
            "OpenSSF model signing needs the model-signing package: pip install model-signing"
        ) from None
    return model_signing


def sign_directory(directory: Path, private_key: Path, signature: Path | None = None) -> Path:
    """Sign every file under `directory`; return where the signature was written."""
    model_signing = _library()
    signature = _signature_path(directory, signature)
    key = load_signing_key(private_key)
    if key.algorithm != "ecdsa-p256":
        raise InvalidInput(f"{private_key}: OpenSSF model signing needs an ECDSA P-256 key")
    # The library reads the key from a path: give it a memory file, never a second copy on disk.
    fd = os.memfd_create("shipyard-signing-key", os.MFD_CLOEXEC)
    try:
        os.write(fd, key.private_pem())
        hashing = model_signing.hashing.Config().set_ignored_paths(
            paths=_ignored(directory, signature), ignore_git_paths=True
        )
        config = model_signing.signing.Config().use_elliptic_key_signer(
            private_key=f"/proc/self/fd/{fd}"
        )
        config.set_hashing_config(hashing).sign(directory, signature)
    finally:
        os.close(fd)
    return signature


def verify_directory(directory: Path, public_key: Path, signature: Path | None = None) -> Path:
    """Check the signature of `directory` by `public_key`; `Untrusted` (exit 8) if it fails."""
    model_signing = _library()
    signature = _signature_path(directory, signature)
    load_public_key(public_key)  # refused by name before the library sees it
    if not signature.is_file():
        raise Untrusted(f"{directory}: no signature at {signature}")
    try:
        config = model_signing.verifying.Config().use_elliptic_key_verifier(public_key=public_key)
        config.verify(directory, signature)
    except ValueError as exc:  # the library's one error for a bad bundle, key or file
        text = " ".join(str(exc).split())[:300]
        raise Untrusted(f"{directory}: the OpenSSF signature {signature} fails: {text}") from None
    return signature
