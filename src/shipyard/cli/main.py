"""Entry point of the `shipyard` command.

Each module in `COMMAND_MODULES` exposes `register(subparsers)`, which adds its sub-commands and
sets `func` (taking the parsed arguments, returning an exit code) on each. A `ShipyardError` is
printed as one line on stderr and mapped to its exit code (see `shipyard.errors`).
"""

import argparse
import importlib
import sys
from collections.abc import Sequence

from shipyard.errors import ShipyardError

COMMAND_MODULES = [
    "shipyard.cli.artifact",
    "shipyard.cli.alias",
    "shipyard.cli.demo",
    "shipyard.cli.distribute",
    "shipyard.cli.data",
    "shipyard.cli.scheduler",
    "shipyard.cli.checkpoint",
    "shipyard.cli.train",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="shipyard", description="The machinery behind machine-learning models."
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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
