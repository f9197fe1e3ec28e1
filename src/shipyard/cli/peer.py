"""`shipyard peer serve`: the per-host distribution daemon, and `shipyard peer status`: what a
daemon holds and is fetching."""

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

# Before numpy loads: the daemon does no linear algebra, and numpy's BLAS would otherwise start a
# thread per core as it is imported: a third of the daemon's start-up CPU.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from shipyard.cli.argtypes import count, integer, nonnegative, positive, seconds
from shipyard.distribute.config import DaemonConfig, parse_address
from shipyard.distribute.daemon import run_daemon

SWARM_KEY_HELP = (
    "a file (mode 600) holding the swarm's shared secret: messages without its MAC are refused"
)


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    peer = subparsers.add_parser("peer", help="run the peer-to-peer distribution daemon")
    commands = peer.add_subparsers(dest="peer_command", required=True, metavar="COMMAND")
    serve = commands.add_parser("serve", help="serve and fetch artifacts with other peers")
    serve.add_argument("--listen", required=True, metavar="HOST:PORT", help="address to listen on")
    serve.add_argument(
        "--advertise", metavar="HOST:PORT", help="address peers dial (default: --listen)"
    )
    serve.add_argument("--seeds", default="", metavar="HOST:PORT,...", help="peers to join through")
    serve.add_argument("--store", required=True, metavar="URI", help="where this host keeps pieces")
    serve.add_argument("--origin", metavar="URI", help="store URI or http:// base of the origin")
    serve.add_argument("--upload-limit-mbit", type=positive, help="cap on bytes served per second")
    serve.add_argument("--no-fsync", action="store_true", help="skip fsync (scratch stores)")
    serve.add_argument(
        "--max-inflight",
        type=count,
        default=DaemonConfig.max_inflight,
        help="piece requests open at once, queued ones included",
    )
    serve.add_argument(
        "--origin-gateways",
        type=integer(0),
        default=DaemonConfig.origin_gateways,
        metavar="N",
        help="members that fetch an artifact from the origin (default: %(default)s; 0: all)",
    )
    serve.add_argument(
        "--origin-inflight",
        type=count,
        default=DaemonConfig.origin_inflight,
        metavar="N",
        help="piece requests a gateway keeps open to the origin (default: %(default)s)",
    )
    serve.add_argument(
        "--congestion-control",
        default=DaemonConfig.congestion_control,
        metavar="NAME",
        help="TCP congestion control for uploads (default: %(default)s; 'kernel': the system's)",
    )
    serve.add_argument(
        "--trace", metavar="FILE", help="append a line to FILE for each piece stored (see hops)"
    )
    serve.add_argument(
        "--max-connections",
        type=count,
        default=DaemonConfig.max_connections,
        metavar="N",
        help="connections open at once; waiting ones make room for new (default: %(default)s)",
    )
    serve.add_argument(
        "--max-connections-per-source",
        type=count,
        default=DaemonConfig.max_connections_per_source,
        metavar="N",
        help="connections one address (IPv6: one /64) may hold (default: %(default)s)",
    )
    serve.add_argument("--swarm-key-file", metavar="FILE", help=SWARM_KEY_HELP)
    serve.add_argument(
        "--members-uri",
        metavar="URI",
        help="a store every host can write (e.g. the origin's bucket): daemons post their "
        "address there and a daemon short of members finds more, whatever its seeds",
    )
    serve.add_argument(
        "--min-transfer-rate-kib",
        type=nonnegative,
        default=DaemonConfig.min_transfer_rate / 1024,
        metavar="N",
        help="KiB/s a piece must average after 1.5 s, or it is cut off (slow: see the docs) "
        "(default: %(default)s; 0: no floor)",
    )
    serve.add_argument(
        "--isolated-origin-mib",
        type=nonnegative,
        default=DaemonConfig.isolated_origin_budget / (1 << 20),
        metavar="N",
        help="MiB a daemon that expects peers but knows none may take from the origin before "
        "it waits for them (default: %(default)s)",
    )
    serve.set_defaults(func=_serve)
    status = commands.add_parser("status", help="what a daemon holds and is fetching")
    status.add_argument("--peer", required=True, metavar="HOST:PORT", help="the daemon to ask")
    status.add_argument("--json", action="store_true", help="print the daemon's reply as JSON")
    status.add_argument("--swarm-key-file", metavar="FILE", help="the daemon's swarm key")
    status.set_defaults(func=_status)
    hops = commands.add_parser("hops", help="how pieces spread, from the daemons' --trace files")
    hops.add_argument("traces", nargs="+", metavar="TRACE", help="trace files of one swarm")
    hops.add_argument(
        "--since", type=seconds, default=0.0, metavar="S",
        help="only pieces whose first copy came at least S seconds after the first request",
    )  # fmt: skip
    hops.add_argument(
        "--until", type=seconds, default=float("inf"), metavar="S",
        help="only pieces whose first copy came less than S seconds after the first request",
    )  # fmt: skip
    hops.add_argument("--json", action="store_true", help="print the summary as JSON")
    hops.set_defaults(func=_hops)


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
        origin_inflight=args.origin_inflight,
        upload_limit_bps=args.upload_limit_mbit * 125_000 if args.upload_limit_mbit else None,
        congestion_control=None if args.congestion_control == "kernel" else args.congestion_control,
        trace=args.trace,
        max_connections=args.max_connections,
        max_connections_per_source=args.max_connections_per_source,
        swarm_key_file=args.swarm_key_file,
        members_uri=args.members_uri,
        min_transfer_rate=args.min_transfer_rate_kib * 1024,
        isolated_origin_budget=int(args.isolated_origin_mib * (1 << 20)),
    )
    run_daemon(
        config, ready=lambda: print(f"peer {config.me} listening", file=sys.stderr, flush=True)
    )
    return 0


def _status(args: argparse.Namespace) -> int:
    from shipyard.distribute.client import daemon_status  # `serve` never loads the pull client
    from shipyard.distribute.swarm_key import SwarmKey

    key = SwarmKey.load(Path(args.swarm_key_file)) if args.swarm_key_file else None
    reply = daemon_status(parse_address(args.peer, "--peer"), key)
    print(json.dumps(reply, indent=2) if args.json else render_status(reply))
    return 0


def _hops(args: argparse.Namespace) -> int:
    from shipyard.distribute.trace import hop_summary, read_traces

    records, torn = read_traces(args.traces)
    if torn:
        print(f"skipped {torn} torn trace lines (a host crashed mid-write)", file=sys.stderr)
    summary = hop_summary(records, args.since, args.until)
    print(json.dumps(summary, indent=2) if args.json else render_hops(summary))
    return 0


def render_hops(summary: dict[str, Any]) -> str:
    """A hop summary as text: copies by hop count, then what one hop cost."""
    depth, delay = summary["mean_depth"], summary["mean_delay_s"]
    lines = [
        f"{summary['copies']} copies, "
        + (f"{depth} hops from the origin on average, " if depth is not None else "")
        + (f"stored {delay} s after the first copy on average" if delay is not None else ""),
        f"{'HOPS':<6}{'SHARE':>7}{'MEDIAN AFTER FIRST COPY':>26}",
    ]
    for depth, row in summary["depths"].items():
        lines.append(f"{depth:<6}{row['share']:>7.0%}{row['median_after_first_s']:>24.2f} s")
    lines.append(f"{'ONE HOP':<10}{'MEDIAN':>9}{'MEAN':>9}{'P90':>9}")
    for part, spread in summary["hop"].items():
        if spread:
            cells = "".join(f"{spread[k]:>8.3f}s" for k in ("median", "mean", "p90"))
            lines.append(f"{part:<10}{cells}")
    return "\n".join(lines)


def render_status(reply: dict[str, Any]) -> str:
    """A daemon's status as a table: one line per artifact, then any error stopping it."""
    lines = [
        f"peer {reply['me']}: {reply['members_alive']} live members"
        + (" (ISOLATED: no live member; see the daemon's log)" if reply.get("isolated") else ""),
        f"{'ARTIFACT':<14}{'PIECES':>13}{'HELD BYTES':>17}{'FROM PEERS':>17}{'FROM ORIGIN':>17}",
    ]
    for held in reply["holdings"]:
        pieces = f"{held['wanted_pieces'] - held['missing_pieces']}/{held['wanted_pieces']}"
        lines.append(
            f"{held['artifact'][:12]:<14}{pieces:>13}{held['held_bytes']:>17,}"
            f"{held['bytes_from_peers']:>17,}{held['bytes_from_origin']:>17,}"
        )
        if held.get("store_error"):
            lines.append(f"  fetch stopped: {held['store_error']}")
        if held.get("origin_error"):
            lines.append(f"  origin: {held['origin_error']}")
    for blamed in reply.get("blamed", []):
        why, until = blamed["reason"], blamed.get("until")
        if isinstance(until, int | float) and 0 <= until < 1e11:  # slowness: the verdict lapses
            when = time.strftime("%H:%M:%S", time.gmtime(until))
            why += ", lapsed" if blamed.get("standing") else f", until {when} UTC"
        lines.append(f"blamed {blamed['peer']} ({why}): {blamed['detail']}")
    return "\n".join(lines)
