"""The peer-memory swarm key of a checkpoint root: `<root>/.peer-memory/key`, private to its user.

Every rank saving under one root, in this attempt or a later one, reads the same key, so a
replacement rank can ask the survivors of the last attempt for their snapshots. The first rank
to find none writes it (0600 in a 0700 directory; racing ranks agree on whichever landed first).
Whoever can read the root's checkpoints can read the key too: the snapshots it guards are those
same bytes.
"""

import secrets
from pathlib import Path

from shipyard.secretfile import read_private_file, write_private_file

KEY_FILE = Path(".peer-memory") / "key"
_KEY_BYTES = 32


def peer_secret(root: Path) -> bytes:
    """The key of checkpoint root `root`, created if it has none (StorageError if unsafe)."""
    path = root / KEY_FILE
    if not path.exists():
        write_private_file(path, secrets.token_hex(_KEY_BYTES).encode(), replace=False)
    return read_private_file(path, "peer-memory key", 4096).strip()
