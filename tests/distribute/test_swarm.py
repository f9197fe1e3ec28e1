"""Whole-swarm behaviour with real daemon processes on loopback."""

import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from shipyard.distribute import PullResult, pull
from shipyard.errors import StorageError
from shipyard.store import Manifest

ORIGIN_BYTES = 'shipyard_peer_bytes_received_total{source="origin"}'
PEER_BYTES = 'shipyard_peer_bytes_received_total{source="peer"}'


def pull_all(peers: list[Any], manifest: Manifest, dests: list[Path]) -> list[PullResult]:
    with ThreadPoolExecutor(len(peers)) as pool:
        futures = [
            pool.submit(pull, p.port, manifest.id, dest, None, None, 60.0)
            for p, dest in zip(peers, dests, strict=True)
        ]
        return [f.result() for f in futures]


def wait_until(predicate: object, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition never became true"
        time.sleep(0.05)


def test_four_hosts_complete_verify_and_keep_origin_to_one_copy(
    cluster: Any, origin: tuple[Path, Manifest], tmp_path: Path
) -> None:
    store, manifest = origin
    first = cluster.peer("h0", [], "--origin", str(store)).start()
    hosts = [first] + [
        cluster.peer(f"h{i}", [first.address], "--origin", str(store)).start() for i in (1, 2, 3)
    ]
    dests = [tmp_path / f"out{i}" for i in range(4)]
    results = pull_all(hosts, manifest, dests)
    source = (tmp_path / "src" / "blob.bin").read_bytes()
    for dest in dests:
        assert (dest / "blob.bin").read_bytes() == source
    origin_bytes = sum(h.metrics().get(ORIGIN_BYTES, 0) for h in hosts)  # 0: owned no piece
    assert origin_bytes <= 1.2 * manifest.size
    assert sum(r.bytes_from_peers for r in results) >= 2 * manifest.size  # the swarm carried it


def test_hosts_finish_when_the_first_seeder_dies_mid_transfer(
    cluster: Any, origin: tuple[Path, Manifest], tmp_path: Path
) -> None:
    store, manifest = origin
    slow = ("--upload-limit-mbit", "24")
    seeder = cluster.seeder("seed", [], store, *slow)
    seeder.start()
    backup = cluster.seeder("backup", [seeder.address], store, *slow)
    backup.start()
    # Every host knows only the first seeder's address; no origin anywhere.
    hosts = [cluster.peer(f"h{i}", [seeder.address], *slow).start() for i in range(3)]
    at_kill: list[int] = []

    def kill_seeder() -> None:
        wait_until(lambda: len(hosts[0].pieces_on_disk()) >= 8)
        seeder.kill()
        at_kill.extend(len(h.pieces_on_disk()) for h in hosts)

    killer = threading.Thread(target=kill_seeder)
    killer.start()
    dests = [tmp_path / f"out{i}" for i in range(3)]
    pull_all(hosts, manifest, dests)
    killer.join()
    assert min(at_kill) < len(manifest.files[0].pieces)  # it died mid-transfer
    source = (tmp_path / "src" / "blob.bin").read_bytes()
    assert all((d / "blob.bin").read_bytes() == source for d in dests)


def test_a_peer_serving_corrupt_bytes_is_caught_and_blamed(
    cluster: Any, origin: tuple[Path, Manifest], tmp_path: Path
) -> None:
    store, manifest = origin
    good = cluster.seeder("good", [], store)
    good.start()
    liar = cluster.seeder("liar", [good.address], store)
    for piece in (liar.store / "pieces").rglob("*"):
        if piece.is_file():  # same size, wrong bytes: only the hash can tell
            data = bytearray(piece.read_bytes())
            data[len(data) // 2] ^= 0xFF
            piece.write_bytes(bytes(data))
    liar.start()
    host = cluster.peer("host", [good.address]).start()
    wait_until(lambda: host.metrics()["shipyard_peer_members_alive"] == 2)
    result = pull(host.port, manifest.id, tmp_path / "out", stall_timeout=60)
    assert (tmp_path / "out" / "blob.bin").read_bytes() == (tmp_path / "src/blob.bin").read_bytes()
    metrics = host.metrics()
    assert metrics["shipyard_peer_pieces_corrupt_total"] >= 1
    assert metrics["shipyard_peer_blamed_peers"] == 1
    assert result.bytes_from_peers == manifest.size


def test_a_killed_host_resumes_from_its_verified_pieces(
    cluster: Any, origin: tuple[Path, Manifest], tmp_path: Path
) -> None:
    """The host's daemon is SIGKILLed mid-download and brought back, as a supervisor would:
    the `shipyard pull` running on the host rides it out, asks the new daemon again, and the
    daemon fetches only the pieces that were not yet on its disk."""
    store, manifest = origin
    seeder = cluster.seeder("seed", [], store, "--upload-limit-mbit", "16")
    seeder.start()
    host = cluster.peer("host", [seeder.address]).start()
    out = tmp_path / "out"
    cli = [sys.executable, "-m", "shipyard.cli.main", "pull", manifest.id, "--peer", host.address]
    puller = subprocess.Popen([*cli, "--dest", str(out)], stderr=subprocess.PIPE, text=True)
    wait_until(lambda: len(host.pieces_on_disk()) >= 8)
    host.kill()
    before = host.pieces_on_disk()
    total = len({p.hash for f in manifest.files for p in f.pieces})
    assert 8 <= len(before) < total
    # Stand in for the dead daemon: the pull's next request fails, and it asks again rather
    # than give up.
    with socket.create_server(host.port) as stand_in:
        stand_in.settimeout(30)
        for _ in range(2):
            stand_in.accept()[0].close()
    assert puller.poll() is None

    host.start()
    _, errors = puller.communicate(timeout=60)
    assert puller.returncode == 0, errors
    metrics = host.metrics()
    assert metrics["shipyard_peer_pieces_resumed_total"] == len(before)
    assert metrics['shipyard_peer_pieces_received_total{source="peer"}'] == total - len(before)
    assert (out / "blob.bin").read_bytes() == (tmp_path / "src/blob.bin").read_bytes()


def test_a_restarted_daemon_finishes_its_fetch_with_nobody_asking_again(
    cluster: Any, origin: tuple[Path, Manifest], tmp_path: Path
) -> None:
    """The pull that asked is gone too: the daemon finds the want in its store and carries on
    from its verified pieces, then drops the record."""
    store, manifest = origin
    seeder = cluster.seeder("seed", [], store, "--upload-limit-mbit", "16")
    seeder.start()
    host = cluster.peer("host", [seeder.address]).start()
    cli = [sys.executable, "-m", "shipyard.cli.main", "pull", manifest.id, "--peer", host.address]
    puller = subprocess.Popen(cli, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(lambda: len(host.pieces_on_disk()) >= 8)
    puller.kill()
    host.kill()
    before = host.pieces_on_disk()
    total = len({p.hash for f in manifest.files for p in f.pieces})
    assert 8 <= len(before) < total
    record = host.store / "wants" / manifest.id
    assert record.exists()

    host.start()
    wait_until(lambda: len(host.pieces_on_disk()) == total)
    wait_until(lambda: not record.exists())
    metrics = host.metrics()
    assert metrics["shipyard_peer_pieces_resumed_total"] == len(before)
    assert metrics['shipyard_peer_pieces_received_total{source="peer"}'] == total - len(before)
    assert "pieces to go" in host.log.read_text()


def test_a_pull_whose_daemon_stays_down_fails_naming_it(
    cluster: Any, origin: tuple[Path, Manifest], tmp_path: Path
) -> None:
    store, manifest = origin
    seeder = cluster.seeder("seed", [], store, "--upload-limit-mbit", "16")
    seeder.start()
    host = cluster.peer("host", [seeder.address]).start()
    killer = threading.Timer(1.0, host.kill)
    killer.start()
    try:
        with pytest.raises(StorageError, match="no progress for 2 s: the daemon is unreachable"):
            pull(host.port, manifest.id, tmp_path / "out", stall_timeout=2)
    finally:
        killer.join()
    assert not (tmp_path / "out").exists()


def test_origin_fetches_stay_capped_with_many_hosts_over_http(
    cluster: Any, http_origin: tuple[str, Manifest, list[int], Any], tmp_path: Path
) -> None:
    url, manifest, served, _ = http_origin
    first = cluster.peer("h0", [], "--origin", url).start()
    hosts = [first] + [
        cluster.peer(f"h{i}", [first.address], "--origin", url).start() for i in range(1, 6)
    ]
    pull_all(hosts, manifest, [tmp_path / f"out{i}" for i in range(6)])
    piece_bytes = sum(served)  # counted by the origin server itself
    assert manifest.size <= piece_bytes <= 1.2 * manifest.size
    assert sum(h.metrics().get(PEER_BYTES, 0) for h in hosts) >= 4 * manifest.size


def test_a_slow_peer_is_hedged_around(
    cluster: Any, origin: tuple[Path, Manifest], tmp_path: Path
) -> None:
    store, manifest = origin
    fast = cluster.seeder("fast", [], store)
    fast.start()
    slow = cluster.seeder(
        "slow", [fast.address], store, "--upload-limit-mbit", "0.5"
    )  # 4 s a piece
    slow.start()
    host = cluster.peer("host", [fast.address]).start()
    wait_until(lambda: host.metrics()["shipyard_peer_members_alive"] == 2)
    pull(host.port, manifest.id, tmp_path / "out", stall_timeout=60)
    assert (tmp_path / "out" / "blob.bin").read_bytes() == (tmp_path / "src/blob.bin").read_bytes()
    # Requests stuck on the slow uplink were duplicated onto the fast peer, which won them.
    assert host.metrics()["shipyard_peer_hedged_requests_total"] >= 1
    assert slow.metrics().get("shipyard_peer_bytes_sent_total", 0) < manifest.size / 2


def test_a_host_restarted_after_its_seeds_died_rejoins_through_members_it_knew(
    cluster: Any, origin: tuple[Path, Manifest], tmp_path: Path
) -> None:
    """Brought back with its unchanged command line, as a supervisor would, the host's only seed
    is dead for good. Nobody else dials it either (it is dead in their views), so it must find the
    swarm through the members it knew before it died."""
    store, manifest = origin
    seeder = cluster.seeder("seed", [], store, "--upload-limit-mbit", "16")
    seeder.start()
    backup = cluster.seeder("backup", [seeder.address], store, "--upload-limit-mbit", "16")
    backup.start()
    host = cluster.peer("host", [seeder.address]).start()
    known = host.store / "members" / "known"  # written within a gossip tick of meeting a member
    wait_until(lambda: known.exists() and backup.address in known.read_text())
    cli = [sys.executable, "-m", "shipyard.cli.main", "pull", manifest.id, "--peer", host.address]
    puller = subprocess.Popen(cli, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(lambda: len(host.pieces_on_disk()) >= 4)
    puller.kill()
    host.kill()
    seeder.kill()
    before = host.pieces_on_disk()
    total = len({p.hash for f in manifest.files for p in f.pieces})
    assert len(before) < total

    host.start()
    wait_until(lambda: len(host.pieces_on_disk()) == total, timeout=30)
    assert host.metrics()['shipyard_peer_pieces_received_total{source="peer"}'] == total - len(
        before
    )
