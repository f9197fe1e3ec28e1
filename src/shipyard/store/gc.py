"""Garbage collection: delete pieces that no manifest references.

Safe against concurrent puts because it runs only under the collection lease (see `leases`), which
no put holds at the same time: a put either finishes its manifest before collection starts (so its
pieces are referenced) or waits until collection ends (so its existence checks see the final state).
"""

import time
from dataclasses import dataclass

from shipyard.store.leases import DEFAULT_TTL, LEASES, gc_lease
from shipyard.store.local import LocalBackend
from shipyard.store.pieces import PIECES, PieceStore

# Temp files younger than this may belong to a put still writing; leave them.
TEMP_GRACE = 3600.0


@dataclass(frozen=True)
class GcReport:
    manifests: int
    pieces_kept: int
    pieces_deleted: int
    bytes_freed: int
    stale_leases_removed: int
    temp_files_removed: int


def collect_garbage(
    pieces: PieceStore, ttl: float = DEFAULT_TTL, dry_run: bool = False
) -> GcReport:
    backend = pieces.backend
    with gc_lease(backend, ttl) as lease:
        referenced: set[str] = set()
        manifests = 0
        for artifact_id in pieces.manifest_ids():
            manifest = pieces.get_manifest(artifact_id)
            manifests += 1
            referenced.update(ref.hash for entry in manifest.files for ref in entry.pieces)
        deleted = freed = kept = 0
        for info in list(backend.list(PIECES)):
            if info.key.rsplit("/", 1)[-1] in referenced:
                kept += 1
                continue
            if not dry_run:
                backend.delete(info.key)
            deleted += 1
            freed += info.size
        now = time.time()
        stale = [
            info.key
            for info in backend.list(LEASES)
            if info.key != lease.key and now - info.mtime >= ttl
        ]
        temp_removed = 0
        if not dry_run:
            for key in stale:
                backend.delete(key)
            if isinstance(backend, LocalBackend):
                temp_removed = backend.clean_temp(older_than=now - TEMP_GRACE)
    return GcReport(manifests, kept, deleted, freed, len(stale), temp_removed)
