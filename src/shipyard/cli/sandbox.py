"""`shipyard sandbox serve|status|metrics|check|run`."""

import argparse
import json
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from shipyard.cli.argtypes import count, integer, nonnegative, positive
from shipyard.errors import InvalidInput


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    sandbox = subparsers.add_parser("sandbox", help="run untrusted code in capped sandboxes")
    commands = sandbox.add_subparsers(dest="sandbox_command", required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="serve sandboxes to drivers on a Unix socket")
    serve.add_argument("--lease-s", type=positive, default=15.0, help="default lease (seconds)")
    serve.add_argument("--ttl-s", type=positive, default=600.0, help="default TTL (seconds)")
    serve.add_argument(
        "--pool-min", type=integer(0), default=2, help="idle sandboxes kept at least"
    )
    serve.add_argument("--pool-max", type=count, default=32, help="idle sandboxes kept at most")
    serve.add_argument(
        "--pool-headroom",
        type=nonnegative,
        default=1.0,
        help="burst margin over arrival rate × cold start (1.0 = twice that)",
    )
    serve.add_argument(
        "--require-cgroups",
        action="store_true",
        help="refuse to start unless cgroups enforce memory and pids (no rlimit fallback)",
    )
    serve.add_argument(
        "--metrics-listen", metavar="HOST:PORT", help="also serve GET /metrics on loopback"
    )
    serve.set_defaults(func=_serve)

    status = commands.add_parser("status", help="print the service's pools, leases and counts")
    status.set_defaults(func=_status)
    metrics = commands.add_parser("metrics", help="print the service's Prometheus metrics")
    metrics.set_defaults(func=_metrics)

    check = commands.add_parser("check", help="say what confines sandboxes here; run `true`")
    check.set_defaults(func=_check)

    run = commands.add_parser("run", help="run one command in a fresh sandbox; print its output")
    run.add_argument("--image", default="host", help="`host` or an artifact reference")
    run.add_argument("--memory-mib", type=count, default=256, help="memory cap (MiB)")
    run.add_argument("--pids", type=count, default=64, help="process cap")
    run.add_argument("--cpus", type=positive, default=1.0, help="CPU cap (cores)")
    run.add_argument("--disk-mib", type=count, default=64, help="writable layer size (MiB)")
    run.add_argument("--files", type=count, default=16384, help="writable layer's file cap")
    run.add_argument("--output-bytes", type=count, default=1 << 20, help="stdout+stderr cap")
    run.add_argument("--timeout", type=positive, default=10.0, help="wall-clock limit (seconds)")
    run.add_argument(
        "--local", action="store_true", help="start the sandbox here, not through the service"
    )
    run.add_argument("argv", nargs="+", metavar="CMD", help="the command and its arguments")
    run.set_defaults(func=_run)


def _serve(args: argparse.Namespace) -> int:
    from shipyard.home import shipyard_home
    from shipyard.sandbox.host import Host
    from shipyard.sandbox.manager import Manager
    from shipyard.sandbox.pool import PoolConfig
    from shipyard.sandbox.server import serve

    if not 0 <= args.pool_min <= args.pool_max:
        raise InvalidInput("--pool-min and --pool-max: need 0 <= min <= max")
    home = shipyard_home()
    stop = threading.Event()
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: stop.set())

    def make() -> Manager:
        host = Host(home, require_cgroups=args.require_cgroups)
        pool = PoolConfig(args.pool_min, args.pool_max, args.pool_headroom)
        manager = Manager(host, pool, lease_s=args.lease_s, ttl_s=args.ttl_s)  # reaps orphans
        try:
            host.check()
        except BaseException:
            manager.shutdown()
            raise
        return manager

    def ready(manager: Manager, path: Path) -> None:
        for line in manager.host.confinement.describe():
            print(f"  {line}", file=sys.stderr)
        reaped = manager.reaped["orphan"]
        print(f"reaped {reaped} sandboxes left by an earlier run", file=sys.stderr)
        print(f"serving sandboxes on {path}", file=sys.stderr, flush=True)

    serve(home, make, args.metrics_listen, ready, stop)
    return 0


def _status(args: argparse.Namespace) -> int:
    from shipyard.sandbox.client import Client

    with Client() as client:
        print(json.dumps(client.status(), indent=2))
    return 0


def _metrics(args: argparse.Namespace) -> int:
    from shipyard.sandbox.client import Client

    with Client() as client:
        print(client.metrics(), end="")
    return 0


def _check(args: argparse.Namespace) -> int:
    from shipyard.home import shipyard_home
    from shipyard.sandbox.host import Host

    host = Host(shipyard_home(), tag="-check")
    try:
        for line in host.confinement.describe():
            print(line)
        host.check()
        print("a sandbox started and ran `true`")
    finally:
        host.close()
    return 0


def _run(args: argparse.Namespace) -> int:
    from shipyard.sandbox import Client, Limits, Outcome, create

    limits = Limits(
        memory_mib=args.memory_mib,
        pids=args.pids,
        cpus=args.cpus,
        disk_mib=args.disk_mib,
        files=args.files,
        output_bytes=args.output_bytes,
    )
    client = None if args.local else Client()
    box: Any = create(args.image, limits) if client is None else client.create(args.image, limits)
    try:
        result = box.exec(args.argv, timeout=args.timeout)
    finally:
        box.close()
        if client:
            client.close()
    sys.stdout.buffer.write(result.stdout)
    sys.stderr.buffer.write(result.stderr)
    print(f"outcome: {result.outcome.value} {result.detail}".rstrip(), file=sys.stderr)
    if result.outcome is Outcome.OK:
        return 0
    return result.exit_code if result.outcome is Outcome.NONZERO_EXIT and result.exit_code else 1
