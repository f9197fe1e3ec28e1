"""An origin that lacks a piece, or serves it corrupt: the swarm takes every other piece, asks the
origin for the bad one again only after a growing wait, and the pull's error names what the
origin did."""

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from shipyard.distribute import pull
from shipyard.errors import StorageError
from shipyard.store import Manifest
from shipyard.store.pieces import piece_key


@pytest.mark.parametrize(
    ("fault", "named"),
    [("missing", r"origin has no 'pieces/"), ("corrupt", r"origin: piece \w+: bytes do not match")],
)
def test_a_bad_origin_piece_is_retried_sparingly_and_named(
    cluster: Any,
    origin: tuple[Path, Manifest],
    http_origin: tuple[str, Manifest, list[int], Counter[str]],
    tmp_path: Path,
    fault: str,
    named: str,
) -> None:
    store, manifest = origin
    url, _, _, asked = http_origin
    bad = manifest.files[0].pieces[3].hash
    if fault == "missing":
        (store / piece_key(bad)).unlink()
    else:
        (store / piece_key(bad)).write_bytes(b"not the piece")
    host = cluster.peer("host", [], "--origin", url).start()

    with pytest.raises(StorageError, match=f"1 pieces missing .*the origin's last error: {named}"):
        pull(host.port, manifest.id, tmp_path / "out", stall_timeout=4)
    total = len({p.hash for f in manifest.files for p in f.pieces})
    assert host.pieces_on_disk() == {p.hash for f in manifest.files for p in f.pieces} - {bad}
    assert len(host.pieces_on_disk()) == total - 1
    # Over the 4 s without progress, waits of 0.5, 1 and 2 s allow about four requests; asked
    # on every scheduling round, the piece drew about twenty a second.
    assert 2 <= asked[piece_key(bad)] <= 8
    assert not (tmp_path / "out").exists()
