"""`shipyard peer status`: what a running daemon holds and is fetching, as a table or as JSON."""

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from shipyard.distribute import pull
from shipyard.errors import StorageError
from shipyard.store import Manifest


def shipyard(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shipyard.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_status_lists_each_artifact_with_its_progress_and_sources(
    cluster: Any, origin: tuple[Path, Manifest]
) -> None:
    store, manifest = origin
    seeder = cluster.seeder("seed", [], store).start()
    host = cluster.peer("host", [seeder.address]).start()
    pull(host.port, manifest.id, stall_timeout=60)
    pieces = len({p.hash for f in manifest.files for p in f.pieces})

    as_json = shipyard("peer", "status", "--peer", host.address, "--json")
    assert as_json.returncode == 0, as_json.stderr
    reply = json.loads(as_json.stdout)
    assert reply["me"] == host.address
    assert reply["members_alive"] >= 1  # the seeder it fetched from
    [held] = reply["holdings"]
    assert held["artifact"] == manifest.id
    assert (held["wanted_pieces"], held["missing_pieces"]) == (pieces, 0)
    assert held["bytes_from_peers"] == held["held_bytes"] == manifest.size
    assert held["store_error"] is None and held["origin_error"] is None

    table = shipyard("peer", "status", "--peer", host.address).stdout.splitlines()
    assert table[0] == f"peer {host.address}: {reply['members_alive']} live members"
    size = f"{manifest.size:,}"
    assert table[2].split() == [manifest.id[:12], f"{pieces}/{pieces}", size, size, "0"]


def test_status_of_a_daemon_that_is_not_there_is_one_line(cluster: Any) -> None:
    gone = cluster.peer("gone", [])  # never started: nothing listens on its port
    result = shipyard("peer", "status", "--peer", gone.address)
    assert result.returncode == StorageError.exit_code
    assert result.stderr.strip() == f"error: peer {gone.address}: connection refused"
