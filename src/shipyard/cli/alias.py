"""`shipyard alias set|history|ls`, and the lineage tree `shipyard lineage` prints."""

import argparse
import datetime

from shipyard.catalog import LineageEdge
from shipyard.errors import NotFound
from shipyard.workspace import Workspace


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    alias = subparsers.add_parser("alias", help="move and inspect aliases (mutable names)")
    commands = alias.add_subparsers(dest="alias_command", required=True, metavar="COMMAND")

    move = commands.add_parser("set", help="point NAME at an artifact (compare-and-swap)")
    move.add_argument("name", help="the alias to move")
    move.add_argument("ref", help="artifact id, unique prefix or alias")
    move.add_argument(
        "--expect",
        metavar="OLD_ID",
        help="fail with exit code 3 unless NAME now points at OLD_ID ('none': unset)",
    )
    move.set_defaults(func=_set)

    history = commands.add_parser("history", help="every move of NAME, oldest first")
    history.add_argument("name", help="the alias")
    history.set_defaults(func=_history)

    ls = commands.add_parser("ls", help="list aliases")
    ls.set_defaults(func=_ls)


def _set(args: argparse.Namespace) -> int:
    ws = Workspace.open()
    target = ws.resolve(args.ref)
    expect: str | bool | None = True
    if args.expect is not None:
        expect = None if args.expect.lower() == "none" else ws.resolve(args.expect)
    ws.move_alias(args.name, target, expect)
    print(f"{args.name} → {target}")
    return 0


def _history(args: argparse.Namespace) -> int:
    events = Workspace.open().catalog.alias_history(args.name)
    if not events:
        raise NotFound(f"no alias named {args.name!r} (`shipyard alias ls` lists them)")
    for event in events:
        when = datetime.datetime.fromtimestamp(event.at).isoformat(timespec="seconds")
        old = event.old_id[:16] if event.old_id else "(new)"
        print(f"{when}  {old} → {event.new_id[:16]}  by {event.by}")
    return 0


def _ls(args: argparse.Namespace) -> int:
    for name, target in Workspace.open().catalog.list_aliases().items():
        print(f"{name}  {target}")
    return 0


def render_lineage(ws: Workspace, root: str, edges: list[LineageEdge], direction: str) -> list[str]:
    """An indented tree: artifacts with kind and aliases, runs with kind and code version."""
    children: dict[str, list[str]] = {}
    for edge in edges:
        near, far = (edge.child, edge.parent) if direction == "up" else (edge.parent, edge.child)
        children.setdefault(near, []).append(far)
    aliases: dict[str, list[str]] = {}
    for name, target in ws.catalog.list_aliases().items():
        aliases.setdefault(target, []).append(name)
    arrow = "←" if direction == "up" else "→"
    lines: list[str] = []

    def label(node: str) -> str:
        if node.startswith("run-"):
            run = ws.catalog.get_run(node)
            return f"{node} [{run.kind}, {run.status}, {run.code_version}]" if run else node
        record = ws.catalog.get_artifact(node)
        names = f" ({', '.join(aliases[node])})" if node in aliases else ""
        return f"{node[:16]} {record.kind if record else '?'}{names}"

    def walk(node: str, depth: int, seen: set[str]) -> None:
        prefix = "  " * depth + (f"{arrow} " if depth else "")
        lines.append(prefix + label(node))
        if node in seen:
            return
        for nxt in sorted(children.get(node, [])):
            walk(nxt, depth + 1, seen | {node})

    walk(root, 0, set())
    return lines
