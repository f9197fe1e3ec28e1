"""Entry point of the `shipyard` command.

Each module in `COMMANDS` exposes `register(subparsers)`, which adds its commands and sets `func`
(taking the parsed arguments, returning an exit code) on each.

How a command ends:
- a `ShipyardError` is printed as one line on stderr and mapped to its exit code (see
  `shipyard.errors`);
- any other exception is a bug: one line `error: <type>: <message>` and exit 1, the traceback
  only under `shipyard --debug` or `SHIPYARD_DEBUG=1`;
- stdout closed early by its reader (`shipyard artifact ls | head -1`) ends the command quietly
  with exit 141, what a shell reports for a tool killed by SIGPIPE (`yes | head -1`);
- Ctrl-C exits 130.
"""

import argparse
import importlib
import os
import select
import sys
import traceback
from collections.abc import Sequence
from typing import Any

from shipyard.errors import ShipyardError

# The module that registers each command. Running a command imports only its module (`--help`
# imports them all), so no command pays for the others' imports: a tenth of the CPU a peer daemon
# needs to start, which a restarted host pays on a busy machine before it can rejoin.
COMMANDS = {
    "artifact": "shipyard.cli.artifact",
    "gc": "shipyard.cli.artifact",
    "alias": "shipyard.cli.alias",
    "lineage": "shipyard.cli.lineage",
    "demo": "shipyard.cli.demo",
    "peer": "shipyard.cli.peer",
    "pull": "shipyard.cli.pull",
    "data": "shipyard.cli.data",
    "scheduler": "shipyard.cli.scheduler",
    "job": "shipyard.cli.scheduler",
    "checkpoint": "shipyard.cli.checkpoint",
    "tokens": "shipyard.cli.checkpoint",
    "train": "shipyard.cli.train",
    "queue": "shipyard.cli.queue",
    "db": "shipyard.cli.db",
    "sandbox": "shipyard.cli.sandbox",
    "ui": "shipyard.cli.ui",
    "model": "shipyard.cli.model",
    "serve": "shipyard.cli.serve",
    "batch": "shipyard.cli.batch",
    "eval": "shipyard.cli.evals",
    "rl": "shipyard.cli.rl",
    "trust": "shipyard.cli.trust",
    "audit": "shipyard.cli.trust",
}

SIGPIPE_EXIT = 141  # 128 + SIGPIPE, as a shell reports a writer whose reader went away


class _Version(argparse.Action):
    """`--version`, read from the installed package's metadata only when asked for: importing
    `importlib.metadata` would add tens of milliseconds to every command's start."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        import shipyard

        print(f"shipyard {shipyard.__version__}")
        parser.exit()


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser for `command` alone when it is known, else for every command."""
    parser = argparse.ArgumentParser(
        prog="shipyard", description="The machinery behind machine-learning models."
    )
    parser.add_argument("--version", action=_Version)
    parser.add_argument(
        "--debug",
        action="store_true",
        help="print the traceback of an error (also SHIPYARD_DEBUG=1)",
    )
    subparsers = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", help="`shipyard COMMAND --help` for more"
    )
    modules = [COMMANDS[command]] if command in COMMANDS else dict.fromkeys(COMMANDS.values())
    for module_name in modules:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # The global options take no value, so the first word that is not an option is the command.
    command = next((word for word in argv if not word.startswith("-")), None)
    options = argv[: argv.index(command)] if command else argv
    debug = "--debug" in options or os.environ.get("SHIPYARD_DEBUG", "") not in ("", "0")
    try:
        code = _run(argv, command, debug)
        sys.stdout.flush()  # a closed pipe shows here, not at exit where it cannot be handled
    except BrokenPipeError as exc:
        if not _stdout_closed():
            _report_bug(exc, debug)
            return 1
        # Nothing more can reach the reader; point stdout at /dev/null so that the interpreter's
        # own flush at exit does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return SIGPIPE_EXIT
    return code


def _run(argv: list[str], command: str | None, debug: bool) -> int:
    """Parse and run one command; every exception but a closed stdout becomes an exit code."""
    try:
        try:
            args = build_parser(command).parse_args(argv)
        except SystemExit as exc:  # --help, --version or a usage error, already printed
            return exc.code if isinstance(exc.code, int) else 0
        code: int = args.func(args)
        return code
    except ShipyardError as exc:
        if debug:
            traceback.print_exception(exc)
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        raise
    except Exception as exc:
        _report_bug(exc, debug)
        return 1


def _report_bug(exc: Exception, debug: bool) -> None:
    if debug:
        traceback.print_exception(exc)
    message = " ".join(str(exc).split())  # one line, whatever the exception carried
    print(
        f"error: {type(exc).__name__}: {message} "
        "(a bug in shipyard; rerun with --debug for the traceback)",
        file=sys.stderr,
    )


def _stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader has gone (a broken socket in a command is a bug)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(event & select.POLLERR for _, event in poller.poll(0))
    except (OSError, ValueError):
        return False


if __name__ == "__main__":
    sys.exit(main())
