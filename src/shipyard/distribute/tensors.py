"""Safetensors-aware partial fetch: which pieces cover the tensors whose names match a pattern.

A safetensors file starts with an 8-byte little-endian header length N and N bytes of JSON that
give each tensor's byte range relative to offset 8 + N. Reading only the header pieces tells us
exactly which pieces one tensor-parallel slice needs; every other file (config, tokenizer) is
small and fetched whole.
"""

import fnmatch
import json
import struct

from shipyard.errors import InvalidInput
from shipyard.store import FileEntry, Manifest

SUFFIX = ".safetensors"
MAX_HEADER = 100 << 20  # the format's own limit


def is_safetensors(entry: FileEntry) -> bool:
    return entry.path.endswith(SUFFIX)


def covering(entry: FileEntry, start: int, end: int) -> list[str]:
    """Hashes of the pieces of `entry` that overlap bytes [start, end)."""
    return [p.hash for p in entry.pieces if p.offset < end and p.offset + p.size > start]


def header_end(entry: FileEntry, prefix: bytes) -> int:
    """Where the file's JSON header ends, from its first bytes (at least 8 of them)."""
    if len(prefix) < 8:
        raise InvalidInput(f"{entry.path}: shorter than a safetensors header")
    (length,) = struct.unpack("<Q", prefix[:8])
    if length > MAX_HEADER or 8 + length > entry.size:
        raise InvalidInput(f"{entry.path}: safetensors header length {length} is impossible")
    return 8 + int(length)


def tensor_ranges(entry: FileEntry, header: bytes, pattern: str) -> list[tuple[int, int]]:
    """Absolute byte ranges of the tensors in `entry` whose names match the glob `pattern`."""
    end = header_end(entry, header)
    try:
        table = json.loads(header[8:end])
    except ValueError as exc:
        raise InvalidInput(f"{entry.path}: safetensors header is not JSON ({exc})") from None
    ranges = []
    for name, info in table.items():
        if name == "__metadata__" or not fnmatch.fnmatchcase(name, pattern):
            continue
        begin, stop = info["data_offsets"]
        if not 0 <= begin <= stop or end + stop > entry.size:
            raise InvalidInput(f"{entry.path}: tensor {name!r} lies outside the file")
        if stop > begin:
            ranges.append((end + begin, end + stop))
    return ranges


def select_pieces(manifest: Manifest, headers: dict[str, bytes], pattern: str) -> list[str]:
    """The pieces a slice needs: every safetensors header, the matching tensors, other files."""
    chosen: dict[str, None] = {}
    matched = 0
    for entry in manifest.files:
        if not is_safetensors(entry):
            chosen.update(dict.fromkeys(p.hash for p in entry.pieces))
            continue
        header = headers[entry.path]
        chosen.update(dict.fromkeys(covering(entry, 0, header_end(entry, header))))
        for start, stop in tensor_ranges(entry, header, pattern):
            matched += 1
            chosen.update(dict.fromkeys(covering(entry, start, stop)))
    if not matched:
        raise InvalidInput(f"no tensor in the artifact matches {pattern!r}")
    return list(chosen)
