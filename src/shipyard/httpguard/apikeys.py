"""API keys: per-deployment bearer tokens on inference, kept only as hashes.

A deployment spec lists `api_keys: ["sha256:<hex>", ...]`, the SHA-256 of each key (`shipyard
serve api-key` makes a key and prints both). When the list is not empty, the router, the
scaled-to-zero activator and every replica answer an inference request only with
`Authorization: Bearer <key>` for one of them (401 otherwise). A plain hash suffices: keys are
32 random bytes, so no guess can be checked against a leaked hash. The presented key's hash is
compared with every stored one in constant time, so the time taken says nothing of how close a
guess came, nor which key matched.
"""

import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shipyard.errors import InvalidInput
from shipyard.httpguard.guard import Refused

MAX_KEYS = 64
_HASH = re.compile(r"sha256:[0-9a-f]{64}")


def new_key() -> str:
    """A fresh API key: 32 random bytes, URL-safe."""
    return "sk-" + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    """What a spec stores for `key`."""
    return "sha256:" + hashlib.sha256(key.encode("utf-8", "replace")).hexdigest()


def parse_hashes(value: Any, where: str) -> tuple[str, ...]:
    """A list of `sha256:<64 hex>` key hashes, or InvalidInput naming `where`."""
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_KEYS:
        raise InvalidInput(f"{where}: expected a list of at most {MAX_KEYS} key hashes")
    for i, item in enumerate(value):
        if not isinstance(item, str) or not _HASH.fullmatch(item):
            shown = repr(item)[:40] if isinstance(item, str) else type(item).__name__
            raise InvalidInput(
                f"{where}[{i}]: expected sha256:<64 lowercase hex> (the hash `shipyard serve "
                f"api-key` prints, never the key itself), got {shown}"
            )
    if len(set(value)) != len(value):
        raise InvalidInput(f"{where}: a key hash appears twice")
    return tuple(value)


@dataclass(frozen=True)
class ApiKeys:
    """The keys one deployment accepts; none: inference is open (to whoever reaches it)."""

    hashes: tuple[str, ...] = ()

    def check(self, headers: Mapping[str, str]) -> None:
        """Refuse (401) a request without one of the keys, when there are any."""
        if not self.hashes:
            return
        scheme, _, presented = headers.get("authorization", "").partition(" ")
        digest = hash_key(presented.strip()).encode() if scheme.lower() == "bearer" else b""
        matched = False
        for stored in self.hashes:  # every one, whatever matched: no timing of which
            matched |= hmac.compare_digest(digest, stored.encode())
        if not matched:
            raise Refused(401, "this deployment needs an API key: Authorization: Bearer <key>")


OPEN = ApiKeys()  # a deployment without keys
