"""Every command, option and positional of `shipyard` says what it is for in `--help`."""

import argparse
import contextlib
import io
import subprocess
import sys
from collections.abc import Iterator

import pytest

from shipyard.cli.main import COMMANDS, build_parser


def parsers(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """`parser` and every sub-command parser below it, with the words that reach each."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from parsers(sub, (*path, name))


def undocumented(parser: argparse.ArgumentParser) -> list[str]:
    """Options, positionals and sub-commands of `parser` with no help text."""
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            # The list of sub-commands, each with its `add_parser(name, help=...)`, is the help
            helped = {choice.dest for choice in action._choices_actions if choice.help}
            missing += [f"{sub} (command)" for sub in action.choices if sub not in helped]
        elif not (action.help or "").strip() or action.help == argparse.SUPPRESS:
            missing.append(str("/".join(action.option_strings) or action.metavar or action.dest))
    return missing


ALL = list(parsers(build_parser()))


@pytest.mark.parametrize("path", [path for path, _ in ALL], ids=lambda p: " ".join(p) or "-")
def test_every_argument_has_help(path: tuple[str, ...]) -> None:
    missing = undocumented(dict(ALL)[path])
    assert not missing, f"`shipyard {' '.join(path)}`: no help text for {', '.join(missing)}"


@pytest.mark.parametrize("path", [path for path, _ in ALL if path], ids=" ".join)
def test_help_of_every_sub_command_exits_0(path: tuple[str, ...]) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit:
        build_parser(path[0]).parse_args([*path, "--help"])
    assert exit.value.code == 0
    assert out.getvalue().startswith(f"usage: shipyard {' '.join(path)}")


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_real_command_prints_its_help(command: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "shipyard", command, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: shipyard {command}")
    assert result.stderr == ""
