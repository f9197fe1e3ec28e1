"""A host whose own disk fills up mid-download: its pull fails at once naming the store and the
reason, no peer is blamed for it, the verified pieces stay, and once there is room a second pull
finishes from them. The store is a real size-limited tmpfs (mounting one needs root)."""

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shipyard.distribute import pull
from shipyard.errors import StorageError
from shipyard.hashing import sha256_hex
from shipyard.store import Manifest

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root"),
]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs: room for the manifest and a few of the artifact's 256 KiB pieces."""
    mount = tmp_path / "host"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_stops_the_fetch_blames_no_peer_and_loses_nothing(
    cluster: Any, origin: tuple[Path, Manifest], small_disk: Path, tmp_path: Path
) -> None:
    store, manifest = origin
    seeder = cluster.seeder("seed", [], store)
    seeder.start()
    host = cluster.peer("host", [seeder.address])
    assert host.store == small_disk
    host.start()

    with pytest.raises(StorageError, match=r"stopped fetching it: cannot write .* disk full"):
        pull(host.port, manifest.id, tmp_path / "out", stall_timeout=120)
    metrics = host.metrics()
    assert metrics["shipyard_peer_store_failures_total"] >= 1
    assert metrics.get("shipyard_peer_blamed_peers", 0) == 0
    assert 'shipyard_peer_request_failures_total{source="peer"}' not in metrics
    kept = host.pieces_on_disk()
    total = len({p.hash for f in manifest.files for p in f.pieces})
    assert 0 < len(kept) < total
    for piece in (small_disk / "pieces").rglob("*"):
        if piece.is_file():
            assert sha256_hex(piece.read_bytes()) == piece.name
    assert "fetch stopped" in host.log.read_text()

    # Room is made: the same daemon, asked again, fetches only what it lacks. The seeder sent
    # each piece once, and once more for every write that failed.
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    pull(host.port, manifest.id, tmp_path / "out", stall_timeout=60)
    assert (tmp_path / "out" / "blob.bin").read_bytes() == (tmp_path / "src/blob.bin").read_bytes()
    assert host.pieces_on_disk() >= kept
    assert not list(small_disk.rglob("*.part"))  # a failed write leaves no partial file
    failed = host.metrics()["shipyard_peer_store_failures_total"]
    served = seeder.metrics()['shipyard_peer_requests_served_total{op="piece"}']
    assert served == total + failed
