"""A host killed in the middle of a large piece keeps the bytes it had, and its restarted daemon
asks only for the rest; kept bytes that no longer match are dropped without blaming anyone; a
daemon refuses piece offsets that make no sense. Real daemons on loopback."""

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from shipyard.distribute.transfer import Lane, PieceCall, piece_request
from shipyard.distribute.wire import PeerUnavailable
from shipyard.hashing import sha256_hex
from shipyard.store import LocalBackend, Manifest, PieceStore, put_tree

from .conftest import BytesSink

BIG = 8 << 20  # one piece, sent at 2 MB/s: about four seconds to cut into
PEER_BYTES = 'shipyard_peer_bytes_received_total{source="peer"}'


def one_big_piece(tmp_path: Path) -> Manifest:
    source = tmp_path / "src"
    source.mkdir()
    (source / "weights.bin").write_bytes(os.urandom(BIG))
    return put_tree(PieceStore(LocalBackend(tmp_path / "made", fsync=False)), source, "model", BIG)


def wait_until(predicate: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition never became true"
        time.sleep(0.02)


def killed_mid_piece(cluster: Any, tmp_path: Path) -> tuple[Any, Any, Manifest, Path]:
    """A seeder and a host whose daemon (and the pull that asked it) were SIGKILLed with part
    of the artifact's one piece in its partial file."""
    manifest = one_big_piece(tmp_path)
    seeder = cluster.seeder("seed", [], tmp_path / "made", "--upload-limit-mbit", "16").start()
    host = cluster.peer("host", [seeder.address]).start()
    cli = [sys.executable, "-m", "shipyard.cli.main", "pull", manifest.id, "--peer", host.address]
    puller = subprocess.Popen(cli, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    partial = host.store / ".partial" / manifest.files[0].pieces[0].hash
    wait_until(lambda: partial.exists() and partial.stat().st_size >= BIG // 4)
    puller.kill()
    puller.wait()
    host.kill()
    assert 0 < partial.stat().st_size < BIG
    assert host.pieces_on_disk() == set()
    return seeder, host, manifest, partial


def assert_stored_whole(host: Any, manifest: Manifest) -> None:
    piece = manifest.files[0].pieces[0].hash
    wait_until(lambda: host.pieces_on_disk() == {piece})
    stored = host.store / "pieces" / piece[:2] / piece
    assert sha256_hex(stored.read_bytes()) == piece
    wait_until(lambda: not (host.store / ".partial" / piece).exists())


def test_a_host_killed_mid_piece_fetches_only_the_bytes_it_lacked(
    cluster: Any, tmp_path: Path
) -> None:
    _, host, manifest, partial = killed_mid_piece(cluster, tmp_path)
    kept = partial.stat().st_size

    host.start()  # as a supervisor would; it finds its want and carries on alone
    assert_stored_whole(host, manifest)
    metrics = host.metrics()
    assert metrics["shipyard_peer_partial_bytes_resumed_total"] == kept
    assert metrics[PEER_BYTES] == BIG - kept
    assert metrics.get("shipyard_peer_partial_pieces_discarded_total", 0) == 0


def test_kept_bytes_spoilt_on_disk_are_dropped_and_nobody_is_blamed(
    cluster: Any, tmp_path: Path
) -> None:
    _, host, manifest, partial = killed_mid_piece(cluster, tmp_path)
    with open(partial, "r+b") as spoil:  # as a power cut can leave a file's last pages
        spoil.seek(1000)
        spoil.write(b"\0" * 4096)

    host.start()
    assert_stored_whole(host, manifest)
    metrics = host.metrics()
    assert metrics["shipyard_peer_partial_pieces_discarded_total"] == 1
    assert metrics[PEER_BYTES] == BIG  # the piece came again, whole
    assert metrics["shipyard_peer_blamed_peers"] == 0
    assert metrics.get("shipyard_peer_pieces_corrupt_total", 0) == 0


@pytest.mark.parametrize(
    ("offset", "why"),
    [(BIG, "offset 8388608 is past"), (-1, "not an integer in 0-"), ("12", "not an integer in 0-")],
)
def test_a_daemon_refuses_an_offset_outside_the_piece(
    cluster: Any, tmp_path: Path, offset: object, why: str
) -> None:
    manifest = one_big_piece(tmp_path)
    seeder = cluster.seeder("seed", [], tmp_path / "made").start()
    request = piece_request(manifest.files[0].pieces[0].hash, manifest.id, "127.0.0.1:9", 0, False)
    with pytest.raises(PeerUnavailable, match=why):
        Lane(seeder.port, 1.0, 5.0).fetch(PieceCall(), request | {"offset": offset}, BytesSink())
    assert seeder.proc.poll() is None
