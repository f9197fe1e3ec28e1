"""Peer-memory redundancy: a lost rank's state comes back from its ring peer, not storage."""

import json
import shutil
import time
from pathlib import Path

import pytest
from tests.checkpoint.conftest import state_hash, trained_state
from tests.checkpoint.ranks import RANKS_TIMEOUT_S, launch

from shipyard.checkpoint import restore_from_peers
from shipyard.checkpoint.peer_key import peer_secret
from shipyard.distribute.swarm_key import SwarmKey
from shipyard.errors import NotFound


@pytest.mark.slow
@pytest.mark.timeout(2 * RANKS_TIMEOUT_S)
def test_lost_rank_restores_from_peer_memory(tmp_path: Path) -> None:
    report, release = tmp_path / "addresses.json", tmp_path / "release"
    args = ["--root", str(tmp_path / "ckpt"), "--report", str(report), "--release", str(release)]
    procs = launch("peer_worker.py", 3, [*args, "--lose", "1"])
    try:
        # Three ranks import torch, form a group and save: minutes on a loaded host.
        assert procs[1].wait(timeout=RANKS_TIMEOUT_S) == -9  # rank 1 is gone, and its memory
        deadline = time.monotonic() + RANKS_TIMEOUT_S
        while not report.exists() and time.monotonic() < deadline:
            assert all(p.poll() is None for p in (procs[0], procs[2])), "a survivor died"
            time.sleep(0.05)
        addresses = json.loads(report.read_text())
        key = SwarmKey(peer_secret(tmp_path / "ckpt"))  # a member of the swarm, as a rank is
        shutil.rmtree(tmp_path / "ckpt")  # and storage too: only peer memory is left
        restored = restore_from_peers(addresses, key=key)
        assert restored.step == 4
        assert state_hash(restored.state) == state_hash(trained_state(seed=4))
        assert restored.manifest.world_size == 3
    finally:
        release.touch()
        for p in procs:
            p.wait(timeout=RANKS_TIMEOUT_S)
    with pytest.raises(NotFound):  # with every peer gone there is nothing to restore from
        restore_from_peers(addresses, key=key)
