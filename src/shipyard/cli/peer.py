"""`shipyard peer serve`: the per-host distribution daemon."""

import argparse
import os
import sys

# Before numpy loads: the daemon does no linear algebra, and numpy's BLAS would otherwise start a
# thread per core as it is imported: a third of the daemon's start-up CPU.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from shipyard.distribute.config import DaemonConfig, parse_address
from shipyard.distribute.daemon import run_daemon


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
