"""`shipyard lineage REF` (an artifact's lineage), `shipyard lineage request ID` (an answer's)."""

import argparse
import datetime
import json
from typing import Any

from shipyard.catalog import LineageEdge
from shipyard.cli.alias import render_lineage
from shipyard.errors import InvalidInput
from shipyard.home import shipyard_home
from shipyard.workspace import Workspace


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    lineage = subparsers.add_parser(
        "lineage",
        help="what produced an artifact, or what it fed; `lineage request ID`: what produced "
        "a served answer",
        description="`shipyard lineage REF [--up|--down]`: an artifact's lineage. "
        "`shipyard lineage request ID [--json]`: the model version, checkpoint, training data "
        "and eval reports behind the answer to request ID (its X-Request-Id).",
    )
    lineage.add_argument("ref", help="artifact id, unique id prefix or alias; or `request`")
    lineage.add_argument("request_id", nargs="?", metavar="ID", help="after `request`: its id")
    direction = lineage.add_mutually_exclusive_group()
    direction.add_argument(
        "--up",
        dest="direction",
        action="store_const",
        const="up",
        help="sources: what produced this (default)",
    )
    direction.add_argument(
        "--down",
        dest="direction",
        action="store_const",
        const="down",
        help="derivatives: everything produced from this",
    )
    lineage.add_argument("--json", action="store_true", help="with `request`: print JSON")
    lineage.set_defaults(func=_lineage, direction="up")


def _lineage(args: argparse.Namespace) -> int:
    if args.ref == "request" and args.request_id is not None:
        return _request(args.request_id, args.json)
    if args.request_id is not None:
        raise InvalidInput(f"lineage: unexpected {args.request_id[:60]!r} (after a REF, nothing)")
    if args.json:
        raise InvalidInput("lineage: --json goes with `lineage request ID`")
    ws = Workspace.open()
    root = ws.resolve(args.ref)
    edges = ws.catalog.lineage(root, args.direction)
    for line in render_lineage(ws, root, edges, args.direction):
        print(line)
    return 0


def _request(rid: str, as_json: bool) -> int:
    from shipyard.serve.router.lineage import request_lineage

    ws = Workspace.open()
    found = request_lineage(ws, shipyard_home(), rid)
    if as_json:
        print(json.dumps(found, indent=1, sort_keys=True))
        return 0
    for line in _text(ws, found):
        print(line)
    return 0


def _text(ws: Workspace, found: dict[str, Any]) -> list[str]:
    r = found["request"]
    when = datetime.datetime.fromtimestamp(float(r.get("time", 0))).isoformat(timespec="seconds")
    tokens = f"{r.get('tokens_in')} in, {r.get('tokens_out')} out"
    lines = [
        f"request {r.get('request_id')}  {when}  status {r.get('status')}  ({tokens})",
        f"deployment {r.get('deployment')}  version {r.get('version')}  "
        f"replica {r.get('replica')}" + (f"  adapter {r['adapter']}" if r.get("adapter") else ""),
    ]
    model = found["model"]
    if model is None:
        artifact = r.get("artifact")
        lines.append(
            f"model: {artifact} (not in this catalog)"
            if artifact
            else "model: unknown (the replica did not name its artifact)"
        )
        return lines
    lines.append("model and what produced it:")
    edges = [LineageEdge(e["parent"], e["child"], e["depth"]) for e in found["edges"]]
    lines += ["  " + line for line in render_lineage(ws, model["id"], edges, "up")]
    if found["truncated"]:
        lines.append("  (lineage cut: too many nodes)")
    lines.append("eval reports about this model:")
    for report in found["eval_reports"]:
        tasks = report["metadata"].get("tasks") if isinstance(report["metadata"], dict) else None
        shown = f"  tasks {', '.join(map(str, tasks))}" if isinstance(tasks, list) else ""
        lines.append(f"  {report['id'][:16]} eval-report{shown}")
    if not found["eval_reports"]:
        lines.append("  none")
    return lines
