"""`shipyard peer serve` (the per-host daemon) and `shipyard pull` (fetch through it)."""

import argparse
import os
import sys
from pathlib import Path

# Before numpy loads: neither the daemon nor `pull` does linear algebra, and numpy's BLAS would
# otherwise start a thread per core as it is imported: a third of the daemon's start-up CPU.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from shipyard.cli.progress import held_progress, stderr
from shipyard.distribute import DaemonConfig, parse_address, pull, run_daemon
from shipyard.errors import InvalidInput
from shipyard.workspace import Workspace


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    peer = subparsers.add_parser("peer", help="run the peer-to-peer distribution daemon")
    commands = peer.add_subparsers(dest="peer_command", required=True, metavar="COMMAND")
    serve = commands.add_parser("serve", help="serve and fetch artifacts with other peers")
    serve.add_argument("--listen", required=True, metavar="HOST:PORT")
    serve.add_argument(
        "--advertise", metavar="HOST:PORT", help="address peers dial (default: --listen)"
    )
    serve.add_argument("--seeds", default="", metavar="HOST:PORT,...", help="peers to join through")
    serve.add_argument("--store", required=True, metavar="URI", help="where this host keeps pieces")
    serve.add_argument("--origin", metavar="URI", help="store URI or http:// base of the origin")
    serve.add_argument("--upload-limit-mbit", type=float, help="cap on bytes served per second")
    serve.add_argument("--no-fsync", action="store_true", help="skip fsync (scratch stores)")
    serve.add_argument(
        "--max-inflight",
        type=int,
        default=DaemonConfig.max_inflight,
        help="piece requests open at once, queued ones included",
    )
    serve.add_argument(
        "--origin-gateways",
        type=int,
        default=DaemonConfig.origin_gateways,
        metavar="N",
        help="members that fetch an artifact from the origin (default: %(default)s; 0: all)",
    )
    serve.add_argument(
        "--congestion-control",
        default=DaemonConfig.congestion_control,
        metavar="NAME",
        help="TCP congestion control for uploads (default: %(default)s; 'kernel': the system's)",
    )
    serve.set_defaults(func=_serve)

    get = subparsers.add_parser("pull", help="fetch an artifact through a peer daemon")
    get.add_argument("ref", help="artifact id (or an alias in the local catalog)")
    get.add_argument("--peer", required=True, metavar="HOST:PORT", help="the daemon to ask")
    get.add_argument("--dest", type=Path, help="also write the files here")
    get.add_argument("--tensors", metavar="PATTERN", help="only tensors matching this glob")
    get.add_argument("--stall-timeout", type=float, default=120.0, metavar="SECONDS")
    get.set_defaults(func=_pull)


def _serve(args: argparse.Namespace) -> int:
    seeds = tuple(parse_address(s, "--seeds entry") for s in args.seeds.split(",") if s.strip())
    config = DaemonConfig(
        listen=parse_address(args.listen, "--listen"),
        advertise=parse_address(args.advertise, "--advertise") if args.advertise else None,
        store=args.store,
        seeds=seeds,
        origin=args.origin,
        fsync=not args.no_fsync,
        max_inflight=args.max_inflight,
        origin_gateways=args.origin_gateways,
        upload_limit_bps=args.upload_limit_mbit * 125_000 if args.upload_limit_mbit else None,
        congestion_control=None if args.congestion_control == "kernel" else args.congestion_control,
    )
    run_daemon(
        config, ready=lambda: print(f"peer {config.me} listening", file=sys.stderr, flush=True)
    )
    return 0


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
        )
    stderr().print(
        f"pulled {result.pieces} pieces ({result.wanted_bytes:,} bytes): "
        f"{result.bytes_from_peers:,} from peers, {result.bytes_from_origin:,} from the origin"
    )
    print(artifact)
    return 0
