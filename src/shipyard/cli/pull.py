"""`shipyard pull`: fetch an artifact through a peer daemon."""

import argparse
import json
import time
from pathlib import Path

from shipyard.cli.argtypes import seconds
from shipyard.cli.progress import held_progress, stderr
from shipyard.distribute.client import PullResult, pull
from shipyard.distribute.config import parse_address
from shipyard.distribute.swarm_key import SwarmKey
from shipyard.errors import InvalidInput
from shipyard.store import Manifest
from shipyard.trust import gate
from shipyard.workspace import Workspace


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    get = subparsers.add_parser("pull", help="fetch an artifact through a peer daemon")
    get.add_argument("ref", help="artifact id (or an alias in the local catalog)")
    get.add_argument("--peer", required=True, metavar="HOST:PORT", help="the daemon to ask")
    get.add_argument(
        "--dest",
        type=Path,
        help="also have the daemon write the files here (it must run on this host, as this "
        "user or root)",
    )
    get.add_argument(
        "--verify", action="store_true", help="with --dest: hash the written files' bytes again"
    )
    get.add_argument("--tensors", metavar="PATTERN", help="only tensors matching this glob")
    get.add_argument(
        "--stall-timeout",
        type=seconds,
        default=120.0,
        metavar="SECONDS",
        help="give up after this many seconds without progress (default 120)",
    )
    get.add_argument(
        "--wait-daemon",
        type=seconds,
        default=10.0,
        metavar="SECONDS",
        help="wait this long for the daemon to listen, if it is starting (default 10)",
    )
    get.add_argument("--swarm-key-file", type=Path, metavar="FILE", help="the daemon's swarm key")
    get.add_argument(
        "--json", action="store_true", help="print the summary as JSON instead of the id"
    )
    get.set_defaults(func=_pull)


def _pull(args: argparse.Namespace) -> int:
    if args.stall_timeout <= 0:
        raise InvalidInput("--stall-timeout must be positive")
    if args.wait_daemon < 0:
        raise InvalidInput("--wait-daemon must be zero or positive")
    if args.verify and args.dest is None:
        raise InvalidInput("--verify needs --dest: it checks the written files")
    ws = Workspace.open()  # for aliases, the trust policy's verdict and the audit
    try:
        full_id = len(args.ref) == 64 and all(c in "0123456789abcdef" for c in args.ref)
        artifact = args.ref if full_id else ws.resolve(args.ref)

        def admit(manifest: Manifest, signatures: bytes | None) -> None:
            gate.admit(ws, gate.Read(artifact, args.ref, "pull"), remote=(manifest, signatures))

        started = time.monotonic()
        with held_progress(f"pull {artifact[:12]}") as progress:
            result = pull(
                parse_address(args.peer, "--peer"),
                artifact,
                dest=args.dest,
                tensors=args.tensors,
                progress=progress,
                stall_timeout=args.stall_timeout,
                key=SwarmKey.load(args.swarm_key_file) if args.swarm_key_file else None,
                verify=args.verify,
                wait_daemon=args.wait_daemon,
                admit=admit,
            )
    finally:
        ws.close()
    seconds = time.monotonic() - started
    stderr().print(report(result, seconds), highlight=False)
    if args.json:
        print(json.dumps(summary(result, seconds)))
    else:
        print(artifact)
    return 0


def report(result: PullResult, seconds: float) -> str:
    """The summary: what was pulled, then one line per source, most bytes first."""
    lines = [
        f"pulled {result.pieces} pieces ({result.wanted_bytes:,} bytes) in {seconds:.1f} s"
        + (f", written by the daemon ({result.copy})" if result.copy else "")
    ]
    rows = sorted(result.sources.items(), key=lambda row: -row[1][1])
    if result.already_held[0]:
        rows.append(("already held", result.already_held))
    width = max((len(source) for source, _ in rows), default=0)
    for source, (pieces, nbytes) in rows:
        lines.append(f"  {source:<{width}}  {pieces:>7} pieces  {nbytes:>15,} bytes")
    return "\n".join(lines)


def summary(result: PullResult, seconds: float) -> dict[str, object]:
    """`--json`: the report's figures."""
    return {
        "artifact": result.artifact,
        "pieces": result.pieces,
        "bytes": result.wanted_bytes,
        "seconds": round(seconds, 3),
        "sources": {s: {"pieces": p, "bytes": b} for s, (p, b) in result.sources.items()},
        "already_held": {"pieces": result.already_held[0], "bytes": result.already_held[1]},
        "copy": result.copy,
    }
