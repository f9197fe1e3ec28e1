"""`pull` waits for its daemon to listen (bounded by `--wait-daemon`), and reports where its
pieces came from: the origin, each peer, or the daemon's store before it asked."""

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from shipyard.distribute import pull
from shipyard.distribute.sources import PullSources, since
from shipyard.errors import StorageError
from shipyard.store import Manifest

from .conftest import Cluster

PULL = [sys.executable, "-m", "shipyard.cli.main", "pull"]


def test_a_pull_started_before_its_daemon_listens_waits_for_it(
    cluster: Cluster, origin: tuple[Path, Manifest], tmp_path: Path
) -> None:
    store, manifest = origin
    seeder = cluster.seeder("seed", [], store)
    with ThreadPoolExecutor(1) as pool:
        pulling = pool.submit(pull, seeder.port, manifest.id, tmp_path / "out", wait_daemon=30)
        # The daemon takes far longer to start than the pull to ask a first time.
        seeder.start()
        result = pulling.result(timeout=60)
    assert result.pieces == len({p.hash for f in manifest.files for p in f.pieces})
    source = (tmp_path / "src" / "blob.bin").read_bytes()
    assert (tmp_path / "out" / "blob.bin").read_bytes() == source


def test_a_daemon_that_never_listens_is_named_after_the_wait(
    cluster: Cluster, origin: tuple[Path, Manifest], tmp_path: Path
) -> None:
    _, manifest = origin
    nobody = cluster.peer("nobody", [])  # never started: nothing listens at its address
    started = time.monotonic()
    with pytest.raises(StorageError, match=f"no daemon listens at {nobody.address} after 1 s"):
        pull(nobody.port, manifest.id, tmp_path / "out", wait_daemon=1)
    assert time.monotonic() - started >= 1
    done = subprocess.run(
        [*PULL, manifest.id, "--peer", nobody.address, "--wait-daemon", "0.5"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 6
    assert f"no daemon listens at {nobody.address} after 0.5 s" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_the_report_names_each_source(
    cluster: Cluster, origin: tuple[Path, Manifest], tmp_path: Path
) -> None:
    """h0 takes everything from the origin, h1 everything from h0, and h1 asked again already
    holds it all."""
    store, manifest = origin
    pieces = len({p.hash for f in manifest.files for p in f.pieces})
    h0 = cluster.peer("h0", [], "--origin", str(store)).start()
    first = pull(h0.port, manifest.id, stall_timeout=60)
    assert first.sources == {"origin": (pieces, manifest.size)}
    assert first.already_held == (0, 0)
    h1 = cluster.peer("h1", [h0.address]).start()
    done = subprocess.run(
        [*PULL, manifest.id, "--peer", h1.address, "--dest", str(tmp_path / "out"), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["sources"] == {h0.address: {"pieces": pieces, "bytes": manifest.size}}
    assert summary["already_held"] == {"pieces": 0, "bytes": 0}
    assert f"{h0.address}  {pieces:>7} pieces" in done.stderr
    again = pull(h1.port, manifest.id, tmp_path / "again", stall_timeout=60)
    assert again.sources == {}
    assert again.already_held == (pieces, manifest.size)


def test_a_pulls_sources_add_up_across_daemon_restarts() -> None:
    """Each daemon's tally counts from its first fetch reply; a restarted daemon starts a new
    tally, and what the old one had stored for the pull is kept."""
    sources = PullSources()
    sources.restarted({"origin": [2, 20], "p:1": [1, 10]})  # before the pull asked
    sources.seen({"origin": [5, 50], "p:1": [1, 10], "p:2": [3, 30]})
    sources.restarted({})  # a new daemon: its tally starts empty
    sources.seen({"p:1": [4, 40]})
    sources.seen(None)  # a reply without a tally changes nothing
    assert sources.total() == {"origin": (3, 30), "p:1": (4, 40), "p:2": (3, 30)}
    assert since({"x": [1, 1]}, "not a report") == {}
    assert since(None, {"x": [2, 5], "bad": [1, -1], "worse": "1"}) == {"x": [2, 5]}
