"""A peer-memory server in a process of its own, for tests that measure what strangers cost it.

Reads the swarm secret from stdin's first line, holds a manifest at step 3 and expects rank 0's
snapshot of step 5 (`--expect` bytes), prints its address, then serves until stdin closes.
"""

import argparse
import sys

from shipyard.checkpoint import PeerMemory
from shipyard.checkpoint.peer import MANIFEST_OWNER


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--expect", type=int, default=1024)
    parser.add_argument("--max-connections", type=int, default=4)
    parser.add_argument("--header-timeout", type=float, default=1.0)
    parser.add_argument("--idle-timeout", type=float, default=1.0)
    args = parser.parse_args()
    secret = sys.stdin.readline().strip().encode()
    peer = PeerMemory(
        secret,
        max_connections=args.max_connections,
        header_timeout_s=args.header_timeout,
        idle_timeout_s=args.idle_timeout,
    )
    peer.hold(3, MANIFEST_OWNER, [memoryview(b"manifest")])
    peer.expect(5, 0, args.expect)
    print(peer.address, flush=True)
    sys.stdin.read()  # until the test closes our stdin
    peer.close()


if __name__ == "__main__":
    main()
