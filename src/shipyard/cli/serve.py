"""`shipyard serve deploy | status | rollout | rollback | api-key | router | replica`."""

import argparse
import datetime
import json
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from shipyard.cli.argtypes import seconds


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    serve = subparsers.add_parser("serve", help="deploy models behind the router; canaries")
    commands = serve.add_subparsers(dest="serve_command", required=True, metavar="COMMAND")

    deploy = commands.add_parser("deploy", help="run a deployment's controller (foreground)")
    deploy.add_argument("spec", type=Path, help="the deployment spec (YAML)")
    deploy.add_argument(
        "--router", metavar="URL", help="a running router (default: start one for this deployment)"
    )
    deploy.set_defaults(func=_deploy)

    status = commands.add_parser("status", help="deployments, their versions and replicas")
    status.add_argument("name", nargs="?", help="one deployment (default: all)")
    status.add_argument("--json", action="store_true", help="the records as JSON")
    status.set_defaults(func=_status)

    rollout = commands.add_parser("rollout", help="canary NAME to a new model version")
    rollout.add_argument("name", help="the deployment")
    rollout.add_argument("--to", required=True, metavar="REF", help="alias or artifact id")
    rollout.add_argument(
        "--timeout",
        type=seconds,
        default=3600.0,
        metavar="SECONDS",
        help="give up waiting for the canary after this long (default 3600)",
    )
    rollout.set_defaults(func=_rollout)

    rollback = commands.add_parser("rollback", help="stop a canary, or return to the warm version")
    rollback.add_argument("name", help="the deployment")
    rollback.add_argument(
        "--timeout",
        type=seconds,
        default=120.0,
        metavar="SECONDS",
        help="give up waiting for the controller after this long (default 120)",
    )
    rollback.set_defaults(func=_rollback)

    api_key = commands.add_parser(
        "api-key", help="make an inference API key: the key, then the hash a spec lists"
    )
    api_key.set_defaults(func=_api_key)

    for name, module in (("router", "router"), ("replica", "replica")):
        passthrough = commands.add_parser(
            name, help=f"run `python -m shipyard.serve.{module}` (its options follow)"
        )
        passthrough.add_argument(
            "options", nargs=argparse.REMAINDER, help=f"options of shipyard.serve.{module}"
        )
        passthrough.set_defaults(func=_passthrough, module=module)


def _api_key(args: argparse.Namespace) -> int:
    from shipyard.httpguard.apikeys import hash_key, new_key

    key = new_key()
    print(f"key:  {key}")
    print(f"hash: {hash_key(key)}")
    print("give the key to the client; list the hash under api_keys: in the spec", file=sys.stderr)
    return 0


def _deploy(args: argparse.Namespace) -> int:
    from shipyard.home import shipyard_home
    from shipyard.serve.deploy import replicas
    from shipyard.serve.deploy.controller import Controller
    from shipyard.serve.deploy.loop import run
    from shipyard.serve.deploy.spec import load_spec

    spec = load_spec(args.spec)
    home = shipyard_home()
    router = None
    if not args.router:
        router = replicas.start_router(home)
    stop = threading.Event()

    def stopping(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, stopping)
    signal.signal(signal.SIGINT, stopping)
    ctrl = Controller(spec, args.router or (router.url if router else ""), home)
    try:
        ctrl.start()
        print(
            f"deployment {spec.name}: {ctrl.count()} replica(s) of {ctrl.current} behind "
            f"{ctrl.router_url} (model {spec.name!r}); metrics at {ctrl.endpoint.url}/metrics; "
            "Ctrl-C stops it",
            flush=True,
        )
        run(ctrl, stop)
    finally:
        ctrl.close()
        if router:
            replicas.stop(router)
    return 0


def _status(args: argparse.Namespace) -> int:
    from shipyard.serve.deploy.state import Records, pid_alive

    records = Records()
    names = [args.name] if args.name else records.names()
    shown = [records.read(name) for name in names]
    for record in shown:
        if record.get("status") == "running" and not pid_alive(record.get("controller_pid")):
            record["status"] = "controller gone"
    if args.json:
        print(json.dumps(shown, indent=1, sort_keys=True))
        return 0
    if not shown:
        print("no deployments")
    for record in shown:
        print(describe(record))
    return 0


def describe(record: dict[str, Any]) -> str:
    """A deployment's record for people: one header line, then versions and the rollout."""
    spec = record.get("spec", {})
    bounds = spec.get("replicas", {})
    lines = [
        f"{record.get('name')}: {record.get('status')}, model {spec.get('model')!r}, "
        f"replicas {bounds.get('min')}..{bounds.get('max')}, router {record.get('router')}"
    ]
    current, previous = record.get("current"), record.get("previous")
    for version, live in sorted(record.get("replicas", {}).items()):
        role = "current" if version == current else "previous" if version == previous else ""
        artifact = record.get("artifacts", {}).get(version, version)
        urls = ", ".join(r.get("url", "?") for r in live) or "none (scaled to zero)"
        lines.append(f"  {artifact[:16]} {role:<8} {len(live)} replica(s): {urls}")
    rollout = record.get("rollout")
    if rollout:
        stages = spec.get("canary", {}).get("stages", [])
        index = rollout.get("stage", 0)
        stage = f"{stages[index]:g}" if isinstance(index, int) and index < len(stages) else "?"
        lines.append(
            f"  rollout to {rollout['candidate'][:16]}: {rollout['status']} at {stage}%"
            + (f" ({rollout['reason']})" if rollout.get("reason") else "")
        )
    updated = record.get("updated")
    if isinstance(updated, int | float):
        when = datetime.datetime.fromtimestamp(updated).isoformat(timespec="seconds")
        lines.append(f"  updated {when}")
    return "\n".join(lines)


def _rollout(args: argparse.Namespace) -> int:
    return _command(args.name, {"op": "rollout", "to": args.to}, args.timeout)


def _rollback(args: argparse.Namespace) -> int:
    return _command(args.name, {"op": "rollback"}, args.timeout)


def _command(name: str, command: dict[str, Any], timeout: float) -> int:
    """Leave `command` for the controller, follow the rollout's stages, exit as it ended."""
    from shipyard.serve.deploy.controller import submit, wait_command
    from shipyard.serve.deploy.state import Records

    records = Records()
    before = records.read(name).get("rollout") or {}
    key = submit(records, name, command)
    seen = {"began": before.get("began"), "entries": len(before.get("history", []))}

    def show(record: dict[str, Any]) -> None:
        rollout = record.get("rollout") or {}
        if rollout.get("began") != seen["began"]:  # a new rollout: its stages are all news
            seen.update(began=rollout.get("began"), entries=0)
        history = rollout.get("history", [])
        for entry in history[seen["entries"] :]:
            print(f"stage {entry['stage']:g}%: {entry['outcome']} ({entry['reason']})", flush=True)
        seen["entries"] = len(history)

    result = wait_command(records, name, key, timeout, show)
    print(result.get("message", ""))
    code = result.get("exit_code", 1)
    return code if isinstance(code, int) else 1


def _passthrough(args: argparse.Namespace) -> int:
    options = [o for o in args.options if o != "--"]
    if args.module == "router":
        from shipyard.serve.router.__main__ import main as router_main

        return router_main(options)
    from shipyard.serve.replica import main as replica_main

    return replica_main(options)
