"""Peer-memory redundancy: a lost rank's state comes back from its ring peer, not storage."""

import json
import shutil
import time
from pathlib import Path

import pytest
from tests.checkpoint.conftest import state_hash, trained_state
from tests.checkpoint.ranks import launch

from shipyard.checkpoint import restore_from_peers
from shipyard.errors import NotFound


@pytest.mark.slow
def test_lost_rank_restores_from_peer_memory(tmp_path: Path) -> None:
    report, release = tmp_path / "addresses.json", tmp_path / "release"
    args = ["--root", str(tmp_path / "ckpt"), "--report", str(report), "--release", str(release)]
    procs = launch("peer_worker.py", 3, [*args, "--lose", "1"])
    try:
        assert procs[1].wait(timeout=120) == -9  # rank 1 is gone, and its memory with it
        deadline = time.monotonic() + 60
        while not report.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        addresses = json.loads(report.read_text())
        shutil.rmtree(tmp_path / "ckpt")  # and storage too: only peer memory is left
        restored = restore_from_peers(addresses)
        assert restored.step == 4
        assert state_hash(restored.state) == state_hash(trained_state(seed=4))
        assert restored.manifest.world_size == 3
    finally:
        release.touch()
        for p in procs:
            p.wait(timeout=60)
    with pytest.raises(NotFound):  # with every peer gone there is nothing to restore from
        restore_from_peers(addresses)
