"""Sharded, asynchronous, verified checkpoints with a commit protocol and peer-memory redundancy.

A trainer makes one `CheckpointManager(root)` per rank, calls `save(step, state, loader=...)`
(returns as soon as its share is in host memory), and on restart `load()` (the latest committed
checkpoint that verifies, any world size; a corrupt one is marked and the one before it loaded) or
`restore_from_peers()` (checked against the same hashes). `latest_committed(root)` never returns a
torn checkpoint, nor (unless `verify=False`) one whose shards fail their SHA-256.
"""

from shipyard.checkpoint.corrupt import CorruptCheckpoint, corrupt_marks
from shipyard.checkpoint.handle import SaveHandle
from shipyard.checkpoint.load import Loaded, load_committed
from shipyard.checkpoint.manager import CheckpointManager
from shipyard.checkpoint.manifest import CheckpointManifest, Committed, committed
from shipyard.checkpoint.peer import PeerMemory, restore_from_peers
from shipyard.checkpoint.publish import Publish
from shipyard.checkpoint.retention import Retention
from shipyard.checkpoint.verify import latest_committed

__all__ = [
    "CheckpointManager",
    "CheckpointManifest",
    "Committed",
    "CorruptCheckpoint",
    "Loaded",
    "PeerMemory",
    "Publish",
    "Retention",
    "SaveHandle",
    "committed",
    "corrupt_marks",
    "latest_committed",
    "load_committed",
    "restore_from_peers",
]
