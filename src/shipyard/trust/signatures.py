"""Artifact signatures: what a signer vouches for, the bytes it signs, and where they are stored.

A signature is one canonical JSON document (sorted keys, no whitespace, UTF-8):

    {"algorithm": "ed25519", "artifact": "<64 hex>", "format": 1, "key": "sha256:<64 hex>",
     "kind": "model", "names": ["prod-llm"], "signature": "<base64>", "signed_at": 1767225600}

The signature covers `DOMAIN` followed by the canonical JSON of every other field: the artifact
id (the SHA-256 of the manifest's canonical bytes, so the manifest itself), its kind, and the
aliases (`names`) the signer vouches point at it. An artifact's signatures are stored beside its
manifest as one file, `signatures/<artifact id>`: the canonical JSON array of these documents,
at most one per key, ordered by key; signing again with a key replaces its earlier signature.
The file travels wherever the manifest does (a store, a bucket, a peer, an HTTP origin), and
arrives from all of them hostile: parsing trusts nothing and names the field.
"""

import base64
import binascii
import json
import time
from dataclasses import dataclass
from typing import Any

from shipyard.errors import InvalidInput, NotFound
from shipyard.hashing import canonical_json
from shipyard.store.backend import Backend
from shipyard.store.manifest import HASH_HEX_LEN, MAX_TEXT, Manifest
from shipyard.trust.keys import ALGORITHMS, PublicKey, SigningKey, check_signature, fingerprint

FORMAT = 1
DOMAIN = b"shipyard artifact signature v1\n"  # no other signed message can start like this
SIGNATURES = "signatures/"
MAX_NAMES = 64
MAX_SIGNATURES = 32  # per artifact
MAX_FILE_BYTES = 512 << 10  # a signature is a few hundred bytes, 14 KiB with 64 long names
_KEYS = frozenset(
    {"algorithm", "artifact", "format", "key", "kind", "names", "signature", "signed_at"}
)
_HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class Signature:
    artifact: str
    kind: str
    names: tuple[str, ...]
    key: str  # the signer's fingerprint
    algorithm: str
    signed_at: int
    signature: bytes

    def claim(self) -> dict[str, Any]:
        return {
            "algorithm": self.algorithm,
            "artifact": self.artifact,
            "format": FORMAT,
            "key": self.key,
            "kind": self.kind,
            "names": list(self.names),
            "signed_at": self.signed_at,
        }

    def message(self) -> bytes:
        return DOMAIN + canonical_json(self.claim())

    def to_bytes(self) -> bytes:
        signature = base64.b64encode(self.signature).decode()
        return canonical_json(self.claim() | {"signature": signature})

    def verifies(self, public: PublicKey) -> bool:
        """Whether `public` is the named key and made this signature."""
        return fingerprint(public) == self.key and check_signature(
            public, self.signature, self.message()
        )


def _from_json(raw: Any) -> Signature:
    if not isinstance(raw, dict):
        raise InvalidInput("top level is not an object")
    if raw.get("format") != FORMAT or type(raw.get("format")) is not int:
        raise InvalidInput(f"unsupported format (this Shipyard reads {FORMAT})")
    if unknown := sorted(set(raw) - _KEYS):
        raise InvalidInput(f"unknown key(s) {', '.join(map(repr, unknown))}")
    if missing := sorted(_KEYS - set(raw)):
        raise InvalidInput(f"missing key(s) {', '.join(map(repr, missing))}")
    artifact, kind, key, algorithm = (raw[k] for k in ("artifact", "kind", "key", "algorithm"))
    if not _is_hex(artifact, HASH_HEX_LEN):
        raise InvalidInput("artifact is not a 64-digit lowercase hex id")
    if not isinstance(kind, str) or not 0 < len(kind) <= MAX_TEXT:
        raise InvalidInput(f"kind is not a string of 1-{MAX_TEXT} characters")
    if not isinstance(key, str) or not key.startswith("sha256:") or not _is_hex(key[7:], 64):
        raise InvalidInput("key is not 'sha256:' and 64 lowercase hex digits")
    if algorithm not in ALGORITHMS:
        raise InvalidInput(f"algorithm is not one of {', '.join(ALGORITHMS)}")
    names = raw["names"]
    if not isinstance(names, list) or len(names) > MAX_NAMES:
        raise InvalidInput(f"names is not a list of at most {MAX_NAMES} aliases")
    if not all(isinstance(name, str) for name in names):
        raise InvalidInput("names holds something that is not a string")
    _check_names(names)
    if names != sorted(set(names)):
        raise InvalidInput("names are not sorted and unique")
    signed_at = raw["signed_at"]
    if type(signed_at) is not int or not 0 <= signed_at < 1 << 40:
        raise InvalidInput("signed_at is not a time in whole seconds")
    encoded = raw["signature"]
    try:
        if not isinstance(encoded, str):
            raise ValueError
        signature = base64.b64decode(encoded, validate=True)
    except (ValueError, binascii.Error):
        raise InvalidInput("signature is not base64") from None
    return Signature(artifact, kind, tuple(names), key, algorithm, signed_at, signature)


def _check_names(names: list[str]) -> None:
    # Imported here: a peer daemon parses signatures but must not load the catalog to start.
    from shipyard.catalog.base import check_alias_name

    for name in names:
        check_alias_name(name)


def _is_hex(value: Any, length: int) -> bool:
    return isinstance(value, str) and len(value) == length and set(value) <= _HEX


def sign(manifest: Manifest, names: list[str], key: SigningKey) -> Signature:
    """`key`'s signature over `manifest` (by its id and kind) and the aliases in `names`."""
    _check_names(names)
    draft = Signature(
        manifest.id,
        manifest.kind,
        tuple(sorted(set(names))),
        key.fingerprint,
        key.algorithm,
        int(time.time()),
        b"",
    )
    return Signature(**{**draft.__dict__, "signature": key.sign(draft.message())})


def signatures_key(artifact_id: str) -> str:
    return f"{SIGNATURES}{artifact_id}"


def parse_signatures(data: bytes, where: str) -> list[Signature]:
    """Parse an artifact's signature file; `InvalidInput` naming `where` and the entry."""
    if len(data) > MAX_FILE_BYTES:
        raise InvalidInput(f"{where}: larger than {MAX_FILE_BYTES} bytes")
    try:
        raw = json.loads(data)
    except RecursionError:
        raise InvalidInput(f"{where}: malformed JSON (nested too deeply)") from None
    except (ValueError, TypeError) as exc:
        raise InvalidInput(f"{where}: malformed JSON ({exc})") from None
    if not isinstance(raw, list) or len(raw) > MAX_SIGNATURES:
        raise InvalidInput(f"{where}: not an array of at most {MAX_SIGNATURES} signatures")
    signatures = []
    for index, entry in enumerate(raw):
        try:
            signatures.append(_from_json(entry))
        except InvalidInput as exc:
            raise InvalidInput(f"{where}: signature {index}: {exc}") from None
    if encode_signatures(signatures) != data:
        raise InvalidInput(
            f"{where}: bytes are not the canonical encoding (one signature per key, by key)"
        )
    return signatures


def encode_signatures(signatures: list[Signature]) -> bytes:
    if len({s.key for s in signatures}) != len(signatures):
        raise InvalidInput("two signatures by one key")
    ordered = sorted(signatures, key=lambda s: s.key)
    return b"[" + b",".join(s.to_bytes() for s in ordered) + b"]"


def read_signatures(backend: Backend, artifact_id: str) -> bytes | None:
    """The raw signature file stored for `artifact_id` (unparsed: readers name what is wrong
    with it), or None when it has none; a file too large to be one reads as empty bytes."""
    key = signatures_key(artifact_id)
    info = backend.stat(key)
    if info is None:
        return None
    if info.size > MAX_FILE_BYTES:
        return b""
    try:
        return backend.get(key)
    except NotFound:
        return None


def add_signature(backend: Backend, signature: Signature) -> None:
    """Store `signature` beside its artifact's manifest, replacing the same key's earlier one.
    A stored file that does not parse is replaced (it vouched for nothing)."""
    data = read_signatures(backend, signature.artifact)
    try:
        others = [] if data is None else parse_signatures(data, "stored signatures")
    except InvalidInput:
        others = []
    kept = [s for s in others if s.key != signature.key][: MAX_SIGNATURES - 1]
    backend.put(signatures_key(signature.artifact), encode_signatures([*kept, signature]))
