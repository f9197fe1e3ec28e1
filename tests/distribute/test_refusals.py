"""Bytes that do not match their address are refused: manifests by artifact id, pieces by hash;
and so are requests the daemon does not know."""

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from shipyard.distribute import pull
from shipyard.distribute.wire import PeerUnavailable, request
from shipyard.errors import IntegrityError
from shipyard.hashing import sha256_hex
from shipyard.store import Manifest, PieceStore


def test_origin_manifest_that_does_not_hash_to_the_id_is_refused(
    cluster: Any, origin: tuple[Path, Manifest], tmp_path: Path
) -> None:
    store, manifest = origin
    # Serve a valid manifest (of a different artifact) under an id it does not hash to.
    other = Manifest(kind="dataset", piece_size=manifest.piece_size, files=manifest.files)
    forged_id = sha256_hex(b"not the manifest")
    (store / "manifests" / forged_id).write_bytes(other.canonical_bytes())
    host = cluster.peer("host", [], "--origin", str(store)).start()
    with pytest.raises(PeerUnavailable, match="do not match"):
        pull(host.port, forged_id, tmp_path / "out", stall_timeout=10)
    assert not (host.store / "manifests" / forged_id).exists()
    assert not (tmp_path / "out").exists()
    # The daemon is unharmed and still fetches the genuine artifact.
    pull(host.port, manifest.id, tmp_path / "good", stall_timeout=30)
    assert PieceStore.parse_manifest(manifest.id, manifest.canonical_bytes()) == manifest


def test_peer_manifest_that_does_not_hash_to_the_id_is_refused_and_blamed(
    cluster: Any, origin: tuple[Path, Manifest], tmp_path: Path
) -> None:
    store, manifest = origin
    liar = cluster.seeder("liar", [], store)
    liar.start()
    # Swap the liar's manifest bytes after it has adopted the artifact and advertises it.
    forged = Manifest(kind="dataset", piece_size=manifest.piece_size, files=manifest.files)
    (liar.store / "manifests" / manifest.id).write_bytes(forged.canonical_bytes())
    host = cluster.peer("host", [liar.address], "--origin", str(store)).start()
    deadline = time.monotonic() + 30
    while host.metrics()["shipyard_peer_members_alive"] < 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    result = pull(host.port, manifest.id, tmp_path / "out", stall_timeout=30)
    assert result.manifest == manifest
    assert sha256_hex((host.store / "manifests" / manifest.id).read_bytes()) == manifest.id
    # Peers are asked before the origin: the liar answered first and is now avoided.
    assert host.metrics()["shipyard_peer_blamed_peers"] == 1


def test_parse_refuses_bytes_for_another_id(origin: tuple[Path, Manifest]) -> None:
    _, manifest = origin
    with pytest.raises(IntegrityError):
        PieceStore.parse_manifest(sha256_hex(b"x"), manifest.canonical_bytes())


def test_an_unknown_request_is_refused_by_name_and_counted_apart(cluster: Any) -> None:
    host = cluster.peer("host", []).start()

    def ask(header: dict[str, Any]) -> None:
        asyncio.run(request(host.port, header, connect_timeout=5, idle_timeout=5))

    for _ in range(2):
        with pytest.raises(PeerUnavailable, match="unknown op 'rm -rf'"):
            ask({"op": "rm -rf"})
    ask({"op": "gossip", "view": {}})
    served = host.metrics()
    # A made-up op is one label, whatever its name: peers cannot grow the metrics page.
    assert served['shipyard_peer_requests_served_total{op="other"}'] == 2
    assert served['shipyard_peer_requests_served_total{op="gossip"}'] == 1
    assert not any("rm -rf" in key for key in served)
