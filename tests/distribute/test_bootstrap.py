"""Finding the swarm without a single address: hosts whose only seed is dead meet on the members
board; a daemon that finds nobody says so, and holds its origin fetches to a budget."""

import random
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shipyard.distribute import pull
from shipyard.distribute.bootstrap import EXPIRE_AFTER, PREFIX, MembersBoard
from shipyard.distribute.client import daemon_status
from shipyard.distribute.config import parse_address
from shipyard.errors import StorageError
from shipyard.store import LocalBackend, Manifest
from shipyard.store.backend import ObjectInfo

from .conftest import PIECE, Cluster
from .rawwire import wait_until


def test_the_board_lists_fresh_members_and_deletes_long_silent_ones(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "board", fsync=False)
    now = [1000.0]
    boards = {
        me: MembersBoard(backend, me, ttl=60, rng=random.Random(0), wall=lambda: now[0])
        for me in ("10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7000")
    }
    for board in boards.values():
        board.post()
    backend.put(PREFIX + "not-an-address", b"{}")  # anyone who can write the bucket
    assert sorted(boards["10.0.0.1:7000"].read()) == ["10.0.0.2:7000", "10.0.0.3:7000"]

    mtime = time.time()
    now[0] = mtime + 61  # every entry is past its TTL: listed, not dialled
    assert boards["10.0.0.1:7000"].read() == []
    now[0] = mtime + EXPIRE_AFTER * 60 + 1
    boards["10.0.0.1:7000"].read()
    assert list(backend.list(PREFIX)) == []  # silent ten TTLs: deleted by whoever lists them


class Listing:
    """A bucket listing of whatever keys anyone wrote under the prefix."""

    def __init__(self, keys: list[str], mtime: float) -> None:
        self.infos = [ObjectInfo(PREFIX + key, 0, mtime) for key in keys]

    def list(self, prefix: str) -> list[ObjectInfo]:
        return self.infos


@pytest.mark.fuzz
@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=80), max_size=40))
def test_the_board_dials_only_addresses_whatever_keys_it_lists(keys: list[str]) -> None:
    listing = Listing(keys, mtime=1000.0)
    board = MembersBoard(listing, "10.0.0.1:7000", 60, random.Random(0), wall=lambda: 1000.0)  # type: ignore[arg-type]
    for member in board.read():
        host, port = parse_address(member)
        assert member != "10.0.0.1:7000" and 0 < port < 65536 and host


def test_hosts_whose_only_seed_is_dead_find_each_other_on_the_board(
    cluster: Cluster, origin: tuple[Path, Manifest], tmp_path: Path
) -> None:
    store, manifest = origin
    dead = cluster.peer("dead", [])  # never started: its address refuses connections
    board = ["--members-uri", str(tmp_path / "board")]
    seeder = cluster.seeder("seed", [dead.address], store, *board).start()
    hosts = [cluster.peer(f"host{i}", [dead.address], *board).start() for i in range(2)]
    for peer in (seeder, *hosts):
        wait_until(lambda p=peer: daemon_status(p.port)["members_alive"] == 2, what="a swarm")

    result = pull(hosts[0].port, manifest.id, tmp_path / "out", stall_timeout=60)
    assert result.bytes_from_peers == manifest.size  # no origin: the swarm it found served it
    assert not daemon_status(hosts[0].port)["isolated"]


@pytest.mark.parametrize("budget_pieces", [4])
def test_an_isolated_daemon_warns_and_keeps_to_its_origin_budget(
    cluster: Cluster, origin: tuple[Path, Manifest], tmp_path: Path, budget_pieces: int
) -> None:
    store, manifest = origin
    seed = cluster.seeder("seed", [], store)  # down for now: the host's only way in
    budget = str(budget_pieces * PIECE / (1 << 20))
    host = cluster.peer(
        "host", [seed.address], "--origin", str(store), "--isolated-origin-mib", budget
    ).start()
    with pytest.raises(StorageError, match="knows no live member"):
        pull(host.port, manifest.id, tmp_path / "out", stall_timeout=8)

    status = daemon_status(host.port)
    assert status["isolated"] and status["members_alive"] == 0
    [held] = status["holdings"]
    # The budget, and at most the one origin request open when it ran out.
    assert budget_pieces * PIECE <= held["bytes_from_origin"] <= (budget_pieces + 1) * PIECE
    assert host.metrics()["shipyard_peer_isolated"] == 1
    assert "WARNING: no live member" in host.log.read_text()

    seed.start()  # its seed comes back: the host joins and finishes from it
    result = pull(host.port, manifest.id, tmp_path / "out", stall_timeout=60)
    assert result.bytes_from_origin == held["bytes_from_origin"]  # the rest from its peer
    wait_until(lambda: host.metrics()["shipyard_peer_isolated"] == 0, what="the host joined")
    assert daemon_status(host.port)["isolated"] is False
    assert "found 1 live members" in host.log.read_text()
