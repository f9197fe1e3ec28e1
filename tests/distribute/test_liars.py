"""Peers that claim every piece and then fail them (`liar.py`), against a real daemon: the honest
host finishes, blames the liar for what it did, and keeps none of the liar's bytes."""

import shutil
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from shipyard.cli.peer import render_status
from shipyard.distribute import pull
from shipyard.distribute.client import daemon_status
from shipyard.store import Manifest
from shipyard.store.local import PARTIAL_DIR

from .conftest import Cluster, Peer
from .rawwire import wait_until

LIAR = Path(__file__).with_name("liar.py")


def start_liar(cluster: Cluster, mode: str, origin_store: Path, pieces: bool = False) -> Peer:
    """A liar whose store holds the origin's manifests (and its pieces too, with `pieces`)."""
    liar = cluster.peer(f"liar-{mode}", [])
    if pieces:
        shutil.copytree(origin_store, liar.store)
    else:
        shutil.copytree(origin_store / "manifests", liar.store / "manifests")
    liar.args = [
        sys.executable,
        str(LIAR),
        mode,
        "--listen",
        liar.address,
        "--store",
        str(liar.store),
    ]
    return liar.start()


def partial_bytes(peer: Peer) -> dict[str, int]:
    """The partial files in the peer's store, by name, with their sizes."""
    directory = peer.store / PARTIAL_DIR
    return {p.name: p.stat().st_size for p in directory.iterdir()} if directory.is_dir() else {}


def blamed(peer: Peer) -> dict[str, str]:
    """Who the peer's daemon blamed, and for what."""
    return {b["peer"]: b["reason"] for b in daemon_status(peer.port)["blamed"]}


@pytest.mark.parametrize(
    ("mode", "reason"), [("notfound", "refused"), ("flip", "corrupt"), ("slow", "slow")]
)
def test_a_host_finishes_from_the_origin_and_blames_a_liar_that_claims_everything(
    cluster: Cluster, origin: tuple[Path, Manifest], tmp_path: Path, mode: str, reason: str
) -> None:
    store, manifest = origin
    liar = start_liar(cluster, mode, store, pieces=mode == "flip")
    host = cluster.peer("host", [liar.address], "--origin", str(store)).start()
    wait_until(lambda: host.metrics()["shipyard_peer_members_alive"] >= 1, what="the liar")

    result = pull(host.port, manifest.id, tmp_path / "out", stall_timeout=60)

    assert (tmp_path / "out/blob.bin").read_bytes() == (tmp_path / "src/blob.bin").read_bytes()
    assert result.bytes_from_peers == 0  # nothing the liar sent was kept
    assert blamed(host) == {liar.address: reason}
    metrics = host.metrics()
    assert metrics[f'shipyard_peer_blamed_total{{reason="{reason}"}}'] == 1
    assert metrics["shipyard_peer_blamed_peers"] == 1
    assert partial_bytes(host) == {}
    log = host.log.read_text()
    assert log.count(f"blamed {liar.address}") == 1  # logged once, however many failures


def test_half_a_piece_of_garbage_then_a_reset_leaves_no_bytes_behind(
    cluster: Cluster, origin: tuple[Path, Manifest], tmp_path: Path
) -> None:
    """With no origin and the liar as its only peer, the host cannot finish: every half piece
    the liar sends is dropped when it resets, and it is blamed. An honest seeder then joins,
    and the host finishes from it."""
    store, manifest = origin
    liar = start_liar(cluster, "halfreset", store)
    host = cluster.peer("host", [liar.address]).start()
    done: list[Any] = []
    puller = threading.Thread(
        target=lambda: done.append(pull(host.port, manifest.id, tmp_path / "out", stall_timeout=60))
    )
    puller.start()
    try:
        wait_until(lambda: liar.address in blamed(host), what="the liar blamed")
        assert blamed(host) == {liar.address: "truncated"}
        table = render_status(daemon_status(host.port))
        assert f"blamed {liar.address} (truncated): peer {liar.address}: " in table
        assert host.metrics()['shipyard_peer_claim_failures_total{reason="truncated"}'] >= 3
        assert partial_bytes(host) == {}  # none of the liar's half pieces was kept

        cluster.seeder("seed", [host.address], store).start()
    finally:
        puller.join(timeout=60)
    assert done and done[0].bytes_from_peers == manifest.size
    assert (tmp_path / "out/blob.bin").read_bytes() == (tmp_path / "src/blob.bin").read_bytes()
    assert partial_bytes(host) == {}
