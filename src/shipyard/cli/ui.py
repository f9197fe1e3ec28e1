"""`shipyard ui`: the web console over the catalog, runs, scheduler, queues and peers."""

import argparse
from pathlib import Path

from shipyard.cli.argtypes import port


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    ui = subparsers.add_parser("ui", help="serve the web console (loopback by default)")
    ui.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback)")
    ui.add_argument("--port", type=port, default=8643, help="TCP port (default 8643)")
    ui.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a --host other than loopback (the token still guards every change)",
    )
    ui.add_argument(
        "--scheduler-url",
        default="http://127.0.0.1:8642",
        help="the scheduler service to ask for free GPUs and usage (default loopback:8642)",
    )
    ui.add_argument(
        "--peer",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="a peer daemon to show on the distribution page (repeatable)",
    )
    ui.add_argument("--swarm-key-file", type=Path, help="the peer daemons' swarm key")
    ui.set_defaults(func=_ui)


def _ui(args: argparse.Namespace) -> int:
    from shipyard.web import serve_console
    from shipyard.workspace import shipyard_home

    serve_console(
        shipyard_home(),
        args.host,
        args.port,
        args.allow_remote,
        args.scheduler_url,
        tuple(args.peer),
        args.swarm_key_file,
    )
    return 0
