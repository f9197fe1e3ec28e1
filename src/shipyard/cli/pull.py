"""`shipyard pull`: fetch an artifact through a peer daemon."""

import argparse
from pathlib import Path

from shipyard.cli.progress import held_progress, stderr
from shipyard.distribute.client import pull
from shipyard.distribute.config import parse_address
from shipyard.distribute.swarm_key import SwarmKey
from shipyard.errors import InvalidInput
from shipyard.workspace import Workspace


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    get = subparsers.add_parser("pull", help="fetch an artifact through a peer daemon")
    get.add_argument("ref", help="artifact id (or an alias in the local catalog)")
    get.add_argument("--peer", required=True, metavar="HOST:PORT", help="the daemon to ask")
    get.add_argument("--dest", type=Path, help="also write the files here")
    get.add_argument("--tensors", metavar="PATTERN", help="only tensors matching this glob")
    get.add_argument(
        "--stall-timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="give up after this many seconds without progress (default 120)",
    )
    get.add_argument("--swarm-key-file", type=Path, metavar="FILE", help="the daemon's swarm key")
    get.set_defaults(func=_pull)


def _resolve(ref: str) -> str:
    if len(ref) == 64 and all(c in "0123456789abcdef" for c in ref):
        return ref
    ws = Workspace.open()
    try:
        return ws.resolve(ref)
    finally:
        ws.close()


def _pull(args: argparse.Namespace) -> int:
    if args.stall_timeout <= 0:
        raise InvalidInput("--stall-timeout must be positive")
    artifact = _resolve(args.ref)
    with held_progress(f"pull {artifact[:12]}") as progress:
        result = pull(
            parse_address(args.peer, "--peer"),
            artifact,
            dest=args.dest,
            tensors=args.tensors,
            progress=progress,
            stall_timeout=args.stall_timeout,
            key=SwarmKey.load(args.swarm_key_file) if args.swarm_key_file else None,
        )
    stderr().print(
        f"pulled {result.pieces} pieces ({result.wanted_bytes:,} bytes): "
        f"{result.bytes_from_peers:,} from peers, {result.bytes_from_origin:,} from the origin"
    )
    print(artifact)
    return 0
