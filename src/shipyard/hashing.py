"""The two primitives content addressing rests on: SHA-256 hex digests and canonical JSON."""

import hashlib
import json
from typing import Any


def sha256_hex(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical_json(value: Any) -> bytes:
    """Deterministic JSON bytes: the same value always serializes to the same bytes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
