"""`shipyard checkpoint` and `shipyard tokens` commands, run as real subprocesses."""

import subprocess
import sys
from pathlib import Path

import torch

from shipyard.checkpoint import CheckpointManager
from shipyard.loader import TokenDatasetWriter


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shipyard", *args], capture_output=True, text=True, timeout=120
    )


def test_checkpoint_ls_and_verify_catch_corruption(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, peer_memory=False)
    for step in (1, 2):
        manager.save(step, {"w": torch.arange(1000.0)}, blocking=True)
    listed = _cli("checkpoint", "ls", str(tmp_path))
    assert listed.returncode == 0 and "step          1" in listed.stdout
    assert _cli("checkpoint", "verify", str(tmp_path)).returncode == 0
    shard = next((tmp_path / "step-0000000002").glob("*.safetensors"))
    raw = bytearray(shard.read_bytes())
    raw[-1] ^= 1
    shard.write_bytes(bytes(raw))
    bad = _cli("checkpoint", "verify", str(tmp_path), "--step", "2")
    assert bad.returncode == 5 and "corrupt" in bad.stderr and "piece 'w@0'" in bad.stderr
    listed = _cli("checkpoint", "ls", str(tmp_path))  # marked: named as refused, not listed
    assert "step          2" not in listed.stdout and "marked corrupt" in listed.stderr
    assert _cli("checkpoint", "verify", str(tmp_path)).returncode == 5  # the newest is refused


def test_tokens_inspect(tmp_path: Path) -> None:
    with TokenDatasetWriter(tmp_path, 100, shard_tokens=5) as writer:
        for _ in range(4):
            writer.add([1, 2, 3])
    out = _cli("tokens", "inspect", str(tmp_path), "--verify")
    assert out.returncode == 0
    assert "2 shards, 4 documents, 12 tokens" in out.stdout
