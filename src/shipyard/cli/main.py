"""Entry point of the `shipyard` command.

Each module in `COMMANDS` exposes `register(subparsers)`, which adds its commands and sets `func`
(taking the parsed arguments, returning an exit code) on each. A `ShipyardError` is
printed as one line on stderr and mapped to its exit code (see `shipyard.errors`).
"""

import argparse
import importlib
import sys
from collections.abc import Sequence

from shipyard.errors import ShipyardError

# The module that registers each command. Running a command imports only its module (`--help`
# imports them all), so no command pays for the others' imports: a tenth of the CPU a peer daemon
# needs to start, which a restarted host pays on a busy machine before it can rejoin.
COMMANDS = {
    "artifact": "shipyard.cli.artifact",
    "gc": "shipyard.cli.artifact",
    "alias": "shipyard.cli.alias",
    "lineage": "shipyard.cli.alias",
    "demo": "shipyard.cli.demo",
    "peer": "shipyard.cli.peer",
    "pull": "shipyard.cli.pull",
    "data": "shipyard.cli.data",
    "scheduler": "shipyard.cli.scheduler",
    "job": "shipyard.cli.scheduler",
    "checkpoint": "shipyard.cli.checkpoint",
    "tokens": "shipyard.cli.checkpoint",
    "train": "shipyard.cli.train",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser for `command` alone when it is known, else for every command."""
    parser = argparse.ArgumentParser(
        prog="shipyard", description="The machinery behind machine-learning models."
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    modules = [COMMANDS[command]] if command in COMMANDS else dict.fromkeys(COMMANDS.values())
    for module_name in modules:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(argv[0] if argv else None).parse_args(argv)
    try:
        code: int = args.func(args)
    except ShipyardError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
