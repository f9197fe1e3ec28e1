"""A swarm with a key: its members transfer an artifact as usual, strangers and replays are
refused and counted, and a key file others can read is refused by name."""

import os
import re
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from shipyard.distribute import pull
from shipyard.distribute.swarm_key import MAX_NONCES, WINDOW_MS, SwarmKey, SwarmKeyRefused
from shipyard.distribute.wire import PeerUnavailable, encode
from shipyard.errors import InvalidInput
from shipyard.store import Manifest

from .rawwire import exchange, frame, status, wait_until


def key_file(path: Path, secret: str | None = None) -> Path:
    path.write_text((secret or secrets.token_hex(32)) + "\n")
    path.chmod(0o600)
    return path


def refused(peer: Any) -> float:
    return peer.metrics().get('shipyard_peer_requests_refused_total{reason="swarm_key"}', 0)


def test_keyed_peers_transfer_and_a_keyless_stranger_is_refused(
    cluster: Any, origin: tuple[Path, Manifest], tmp_path: Path
) -> None:
    store, manifest = origin
    path = key_file(tmp_path / "swarm.key")
    key = SwarmKey.load(path)
    keyed = ("--swarm-key-file", str(path))
    seeder = cluster.seeder("seed", [], store, *keyed).start()
    host = cluster.peer("host", [seeder.address], *keyed).start()
    stranger = cluster.peer("stranger", [host.address, seeder.address]).start()

    result = pull(host.port, manifest.id, tmp_path / "out", stall_timeout=60, key=key)
    assert result.bytes_from_peers == manifest.size  # from the seeder, over signed requests
    blob = tmp_path / "out" / "blob.bin"
    assert blob.read_bytes() == (tmp_path / "src" / "blob.bin").read_bytes()

    # The stranger's gossip is refused by both; neither counts it a member, nor it them.
    wait_until(lambda: refused(host) > 0 and refused(seeder) > 0, what="gossip refused")
    assert status(host.port, key)["members_alive"] == 1
    assert status(stranger.port)["members_alive"] == 0
    # Its requests, and a pull without the key, are told why.
    piece = manifest.files[0].pieces[0].hash
    for request in ({"op": "piece", "hash": piece}, {"op": "status"}):
        reply = exchange(seeder.port, frame(request))
        assert reply is not None and reply["kind"] == "SwarmKeyRefused"
        assert reply["error"].endswith("swarm key (see --swarm-key-file)")
    with pytest.raises(PeerUnavailable, match="swarm key"):
        pull(host.port, manifest.id, tmp_path / "out2", stall_timeout=5)
    assert "Traceback" not in host.log.read_text() + seeder.log.read_text()


def test_a_wrong_key_a_replay_and_a_stale_message_are_refused(cluster: Any, tmp_path: Path) -> None:
    path = key_file(tmp_path / "swarm.key")
    key = SwarmKey.load(path)
    peer = cluster.peer("p", [], "--swarm-key-file", str(path)).start()
    other = SwarmKey(secrets.token_bytes(32))
    reply = exchange(peer.port, encode({"op": "status"}, other))
    assert reply is not None and reply["kind"] == "SwarmKeyRefused"

    signed = encode({"op": "status"}, key)
    assert status(peer.port, key)["me"] == peer.address
    assert exchange(peer.port, signed, key)["me"] == peer.address  # type: ignore[index]
    replayed = exchange(peer.port, signed)
    assert replayed is not None and "a replay" in replayed["error"]

    behind = time.time_ns() // 1_000_000 - 2 * WINDOW_MS
    late = SwarmKey(path.read_bytes().strip(), wall_ms=lambda: behind)
    stale = exchange(peer.port, encode({"op": "status"}, late))
    assert stale is not None and "off this host's clock" in stale["error"]
    assert refused(peer) == 3


def test_nonces_past_the_memory_bound_are_still_refused_as_replays() -> None:
    clock = [1_000_000]
    key = SwarmKey(b"k" * 32, wall_ms=lambda: clock[0])
    first = {"ts": clock[0], "nonce": "first"}
    key.check_fresh(dict(first))
    for i in range(MAX_NONCES):  # as many more within the window: "first" is forgotten
        clock[0] += 1 if i % 1000 == 0 else 0
        key.check_fresh({"ts": clock[0], "nonce": f"n{i}"})
    with pytest.raises(SwarmKeyRefused, match="replay"):
        key.check_fresh(dict(first))
    key.check_fresh({"ts": clock[0], "nonce": "new"})  # fresh messages still pass


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_a_key_file_others_can_read_is_refused_by_name(tmp_path: Path, mode: int) -> None:
    path = key_file(tmp_path / "swarm.key")
    path.chmod(mode)
    why = f"{re.escape(str(path))} is open to other users .*chmod 600"
    with pytest.raises(InvalidInput, match=why):
        SwarmKey.load(path)
    result = subprocess.run(
        [sys.executable, "-m", "shipyard.cli.main", "peer", "serve", "--listen", "127.0.0.1:9",
         "--store", str(tmp_path / "store"), "--swarm-key-file", str(path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == InvalidInput.exit_code
    assert str(path) in result.stderr and "Traceback" not in result.stderr


def test_a_missing_or_short_key_file_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"swarm key file .*missing\.key: No such file"):
        SwarmKey.load(tmp_path / "missing.key")
    with pytest.raises(InvalidInput, match=r"short\.key: a swarm key needs at least 16 bytes"):
        SwarmKey.load(key_file(tmp_path / "short.key", "tooshort"))
    assert os.stat(tmp_path / "short.key").st_mode & 0o777 == 0o600
