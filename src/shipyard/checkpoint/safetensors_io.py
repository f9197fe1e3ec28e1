"""Write a safetensors file durably while hashing it; read one back after checking its hash.

The writer emits the safetensors layout itself (8-byte header length, JSON header, raw bytes) so
that tensors go from host memory to the file with no intermediate copy and are hashed on the way;
the reader is the `safetensors` library. No pickle anywhere.
"""

import hashlib
import json
from collections.abc import Iterator
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


def raw_bytes(tensor: torch.Tensor) -> memoryview:
    """The bytes of a contiguous CPU tensor, without a copy."""
    return tensor.view(torch.uint8).numpy().data if tensor.numel() else memoryview(b"")


def write_safetensors(path: Path, tensors: list[tuple[str, torch.Tensor]]) -> FileDigest:
    """Write `tensors` (contiguous, on the CPU) to `path` atomically and durably."""
    header: dict[str, object] = {}
    offset = 0
    for name, tensor in tensors:
        end = offset + tensor.numel() * tensor.element_size()
        header[name] = {
            "dtype": _DTYPES[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, end],
        }
        offset = end
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # the data starts 8-byte aligned
    prefix = len(head).to_bytes(8, "little") + head
    digest = hashlib.sha256(prefix)

    def chunks() -> Iterator[memoryview | bytes]:
        yield prefix
        for _, tensor in tensors:
            data = raw_bytes(tensor)
            digest.update(data)  # hashed as it is written: no second read of the file
            yield data

    write_chunks_atomic(path, chunks())
    return FileDigest(len(prefix) + offset, digest.hexdigest())


def read_safetensors(path: Path, expect: FileDigest) -> dict[str, torch.Tensor]:
    """The tensors in `path`, after checking its size and SHA-256 against `expect`."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise NotFound(f"checkpoint shard {path} is missing") from None
    except OSError as exc:
        raise StorageError(f"cannot read checkpoint shard {path}: {exc.strerror}") from None
    if len(data) != expect.size or hashlib.sha256(data).hexdigest() != expect.sha256:
        raise IntegrityError(
            f"checkpoint shard {path} is corrupt: its size or SHA-256 does not match the manifest"
        )
    try:
        loaded: dict[str, torch.Tensor] = safetensors.torch.load(data)
    except safetensors.SafetensorError as exc:  # the manifest vouched for bytes that do not parse
        raise IntegrityError(f"checkpoint shard {path} is not a safetensors file: {exc}") from None
    return loaded
