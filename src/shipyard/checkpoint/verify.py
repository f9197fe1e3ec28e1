"""Verification of a checkpoint's bytes against its manifest.

A shard is accepted only if its size and SHA-256 match the manifest. When they do not, the damage
is named: the safetensors header (rebuilt from the manifest, byte for byte) or the first piece
whose recorded CRC-32 no longer matches. A committed checkpoint on storage that fails is marked
(see `corrupt`), so nothing loads or retries it; a re-save of the same step removes the mark.
Snapshots from peer memory are the same pieces without the header, and are checked against the
same SHA-256.
"""

import hashlib
import zlib
from pathlib import Path

from shipyard.checkpoint.corrupt import CorruptCheckpoint, mark_corrupt
from shipyard.checkpoint.manifest import (
    CheckpointManifest,
    Committed,
    ShardRecord,
    open_committed,
    shard_path,
    step_dirs,
)
from shipyard.checkpoint.plan import Piece
from shipyard.checkpoint.safetensors_io import header_prefix, read_shard

HEADER = "(header)"  # the piece named when the bytes before the data are damaged


def rank_pieces(manifest: CheckpointManifest, rank: int) -> list[Piece]:
    """The pieces saving rank `rank` wrote, in the order of its shard."""
    return [p for p in manifest.pieces if p.rank == rank]


def check_shard(
    manifest: CheckpointManifest,
    shard: ShardRecord,
    data: bytes | bytearray,
    source: str,
    *,
    header: bool = True,
) -> None:
    """Raise `CorruptCheckpoint` unless `data` is `shard` as recorded; `header=False`: `data`
    holds the pieces only (a peer's snapshot), and the header is rebuilt from the manifest."""
    pieces = rank_pieces(manifest, shard.rank)
    dtypes = {t.path: t.dtype for t in manifest.tensors}
    prefix = header_prefix([(p.key, dtypes[p.path], (p.stop - p.start,)) for p in pieces])
    digest = hashlib.sha256() if header else hashlib.sha256(prefix)
    digest.update(data)
    size = len(data) + (0 if header else len(prefix))
    if size == shard.digest.size and digest.hexdigest() == shard.digest.sha256:
        return
    body = memoryview(data)[len(prefix) :] if header else memoryview(data)
    if header and bytes(data[: len(prefix)]) != prefix:
        raise CorruptCheckpoint(manifest.step, source, HEADER, "the header differs")
    at = 0
    for i, piece in enumerate(pieces):
        end = at + (piece.stop - piece.start) * dtypes[piece.path].itemsize
        if end > len(body):
            raise CorruptCheckpoint(manifest.step, source, piece.key, "the data is cut short")
        crcs = shard.digest.crc32
        if crcs and zlib.crc32(body[at:end]) != crcs[i]:
            raise CorruptCheckpoint(manifest.step, source, piece.key, "its CRC-32 differs")
        at = end
    problem = f"{size} bytes, {shard.digest.size} recorded" if size != shard.digest.size else ""
    raise CorruptCheckpoint(
        manifest.step, source, None, problem or "its SHA-256 differs from the manifest's"
    )


def verify_shards(checkpoint: Committed) -> None:
    """Read and check every shard; a failure marks the checkpoint corrupt and is raised."""
    for shard in checkpoint.manifest.shards:
        path = shard_path(checkpoint.path, shard.file)
        check_stored(checkpoint, shard, read_shard(path), str(path))


def check_stored(checkpoint: Committed, shard: ShardRecord, data: bytes, source: str) -> None:
    """`check_shard` for a shard read from storage: a failure marks the checkpoint corrupt."""
    try:
        check_shard(checkpoint.manifest, shard, data, source)
    except CorruptCheckpoint as exc:
        mark_corrupt(checkpoint.path, exc)
        raise


def latest_committed(root: str | Path, *, verify: bool = True) -> Committed | None:
    """The newest committed checkpoint under `root` whose shards match their SHA-256 (each one
    that does not is marked corrupt and passed over). `verify=False`: sizes and marks only, no
    reading, for bookkeeping that runs often; a load still checks every hash."""
    for _, directory in reversed(step_dirs(Path(root))):
        found = open_committed(directory)
        if found is None:
            continue
        if not verify:
            return found
        try:
            verify_shards(found)
            return found
        except CorruptCheckpoint:
            continue
    return None
