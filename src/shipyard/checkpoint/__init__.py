"""Sharded, asynchronous, verified checkpoints with a commit protocol and peer-memory redundancy.

A trainer makes one `CheckpointManager(root)` per rank, calls `save(step, state, loader=...)`
(returns as soon as its share is in host memory), and on restart `load()` (the latest committed
checkpoint, checksums verified, any world size) or `restore_from_peers()`. `latest_committed(root)`
never returns a torn checkpoint.
"""

from shipyard.checkpoint.handle import SaveHandle
from shipyard.checkpoint.load import Loaded, load_committed
from shipyard.checkpoint.manager import CheckpointManager
from shipyard.checkpoint.manifest import CheckpointManifest, Committed, committed, latest_committed
from shipyard.checkpoint.peer import PeerMemory, restore_from_peers
from shipyard.checkpoint.publish import Publish
from shipyard.checkpoint.retention import Retention

__all__ = [
    "CheckpointManager",
    "CheckpointManifest",
    "Committed",
    "Loaded",
    "PeerMemory",
    "Publish",
    "Retention",
    "SaveHandle",
    "committed",
    "latest_committed",
    "load_committed",
    "restore_from_peers",
]
