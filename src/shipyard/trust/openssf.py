"""OpenSSF model-signing interop: sign and verify a model directory in its format, with keys.

The format is model-signing's own (a Sigstore bundle holding a DSSE envelope over an in-toto
statement of every file's SHA-256), made and checked by the `model_signing` library itself, key
based only: no Sigstore, no network. A directory Shipyard signs verifies with `model_signing
verify key`, and one signed by `model_signing sign key` verifies here. The keys are the ECDSA
P-256 pairs `shipyard trust keygen --algorithm ecdsa-p256` makes; the private key is read through
the same permission checks as every other key, then handed to the library in memory. Without a
key, a directory is checked against the trust policy's ECDSA signers of models.
"""

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from shipyard.errors import InvalidInput, Untrusted
from shipyard.trust.keys import algorithm_of, load_public_key, load_signing_key, public_pem
from shipyard.trust.policy import load_policy, policy_path

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
    hashing = model_signing.hashing.Config().set_ignored_paths(
        paths=_ignored(directory, signature), ignore_git_paths=True
    )
    # The library reads the key from a path: give it a memory file, never a second copy on disk.
    with _memory_file(key.private_pem()) as path:
        config = model_signing.signing.Config().use_elliptic_key_signer(private_key=path)
        config.set_hashing_config(hashing).sign(directory, signature)
    return signature


@contextmanager
def _memory_file(data: bytes) -> Iterator[str]:
    """A path to `data` in memory only, for as long as the block runs."""
    fd = os.memfd_create("shipyard-key", os.MFD_CLOEXEC)
    try:
        os.write(fd, data)
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)


def verify_directory(
    directory: Path, public_key: Path | None = None, signature: Path | None = None
) -> str:
    """Check the signature of `directory`; return who made it. By `public_key` when given, else
    by each ECDSA P-256 signer the trust policy allows to sign models. `Untrusted` (exit 8) when
    none verifies it."""
    model_signing = _library()
    signature = _signature_path(directory, signature)
    if public_key is not None:
        candidates = [(str(public_key), load_public_key(public_key))]
        if algorithm_of(candidates[0][1]) != "ecdsa-p256":
            raise InvalidInput(f"{public_key}: OpenSSF model signing needs an ECDSA P-256 key")
    else:
        policy = load_policy()
        if policy is None:
            raise InvalidInput(f"no trust policy at {policy_path()}: give the signer's --key")
        candidates = [
            (signer.name, signer.key)
            for signer in policy.signers.values()
            if algorithm_of(signer.key) == "ecdsa-p256" and signer.may_sign("model", None)
        ]
    if not signature.is_file():
        raise Untrusted(f"{directory}: no signature at {signature}")
    failures = []
    for name, key in candidates:
        with _memory_file(public_pem(key)) as path:
            try:
                config = model_signing.verifying.Config().use_elliptic_key_verifier(public_key=path)
                config.verify(directory, signature)
                return name
            except ValueError as exc:  # the library's one error for a bad bundle, key or file
                failures.append(f"{name}: {' '.join(str(exc).split())[:300]}")
    if not failures:
        raise Untrusted(f"{directory}: the trust policy lists no ECDSA P-256 signer of models")
    raise Untrusted(f"{directory}: the OpenSSF signature {signature} fails: {'; '.join(failures)}")
