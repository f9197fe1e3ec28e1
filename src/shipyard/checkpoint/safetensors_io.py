"""Write a safetensors file durably while hashing it; read one back after checking its hash.

The writer emits the safetensors layout itself (8-byte header length, JSON header, raw bytes) so
that tensors go from host memory to the file with no intermediate copy and are hashed on the way:
SHA-256 of the whole file (the integrity check) and a CRC-32 of each tensor (cheap, only to name
which tensor a damaged file lost). The reader is the `safetensors` library. No pickle anywhere.
"""

import hashlib
import json
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import safetensors.torch
import torch

from shipyard.durable import write_chunks_atomic
from shipyard.errors import IntegrityError, NotFound, StorageError

_DTYPES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
    torch.float8_e4m3fn: "F8_E4M3",
    torch.float8_e5m2: "F8_E5M2",
    torch.uint16: "U16",
    torch.uint32: "U32",
    torch.uint64: "U64",
}
# The dtypes a checkpoint may hold, by the name its manifest gives them ("float32"): a manifest
# names one of these or is refused, never an arbitrary torch attribute.
DTYPE_NAMES = {str(dtype).removeprefix("torch."): dtype for dtype in _DTYPES}


@dataclass(frozen=True)
class FileDigest:
    size: int
    sha256: str
    crc32: tuple[int, ...] = ()  # of each tensor's bytes, in file order; () if not recorded


def raw_bytes(tensor: torch.Tensor) -> memoryview:
    """The bytes of a contiguous CPU tensor, without a copy."""
    return tensor.view(torch.uint8).numpy().data if tensor.numel() else memoryview(b"")


def header_prefix(entries: Sequence[tuple[str, torch.dtype, Sequence[int]]]) -> bytes:
    """The bytes before the data: header length and JSON header of (name, dtype, shape)s.

    A pure function of the entries, so a reader can rebuild it from the manifest alone.
    """
    header: dict[str, object] = {}
    offset = 0
    for name, dtype, shape in entries:
        numel = 1
        for dim in shape:
            numel *= dim
        end = offset + numel * dtype.itemsize
        header[name] = {
            "dtype": _DTYPES[dtype],
            "shape": list(shape),
            "data_offsets": [offset, end],
        }
        offset = end
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # the data starts 8-byte aligned
    return len(head).to_bytes(8, "little") + head


def write_safetensors(path: Path, tensors: list[tuple[str, torch.Tensor]]) -> FileDigest:
    """Write `tensors` (contiguous, on the CPU) to `path` atomically and durably."""
    prefix = header_prefix([(name, t.dtype, tuple(t.shape)) for name, t in tensors])
    digest = hashlib.sha256(prefix)
    crcs: list[int] = []

    def chunks() -> Iterator[memoryview | bytes]:
        yield prefix
        for _, tensor in tensors:
            data = raw_bytes(tensor)
            digest.update(data)  # hashed as it is written: no second read of the file
            crcs.append(zlib.crc32(data))
            yield data

    write_chunks_atomic(path, chunks())
    size = len(prefix) + sum(t.numel() * t.element_size() for _, t in tensors)
    return FileDigest(size, digest.hexdigest(), tuple(crcs))


def read_shard(path: Path) -> bytes:
    """A shard's bytes; NotFound or StorageError if they cannot be read."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise NotFound(f"checkpoint shard {path} is missing") from None
    except OSError as exc:
        raise StorageError(f"cannot read checkpoint shard {path}: {exc.strerror}") from None


def parse_safetensors(data: bytes, source: str) -> dict[str, torch.Tensor]:
    """The tensors in `data`, whose hash the caller has checked."""
    try:
        loaded: dict[str, torch.Tensor] = safetensors.torch.load(data)
    except safetensors.SafetensorError as exc:  # the manifest vouched for bytes that do not parse
        raise IntegrityError(
            f"checkpoint shard {source} is not a safetensors file: {exc}"
        ) from None
    return loaded
