"""In-process local swarm used by `shipyard demo`."""

from pathlib import Path

from shipyard.distribute.local import pull_to_local_peers
from shipyard.store import Manifest


def test_local_peers_pull_one_origin_copy_between_them(
    origin: tuple[Path, Manifest], tmp_path: Path
) -> None:
    store, manifest = origin
    results = pull_to_local_peers(store.as_uri(), manifest.id, tmp_path / "peers", count=3)
    source = (tmp_path / "src" / "blob.bin").read_bytes()
    for i in range(3):
        assert (tmp_path / "peers" / f"dest-{i}" / "blob.bin").read_bytes() == source
    assert sum(r.bytes_from_origin for _, r in results) <= 1.2 * manifest.size
    assert sum(r.bytes_from_peers for _, r in results) >= manifest.size
