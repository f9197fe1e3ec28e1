"""How the `shipyard` command ends: its version, its errors, a bug, and a reader that goes away.

Each test runs the real command in a subprocess. A bug cannot be produced for real (every real
one gets fixed), so the bug tests plant a `boom` command through `COMMANDS`, the table every
command is registered from, and run the real `main` with it.
"""

import importlib.metadata
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from shipyard.cli.main import SIGPIPE_EXIT

Cli = Callable[..., subprocess.CompletedProcess[str]]

PLANTED = """
import sys, types
from shipyard.cli import main as cli

FAULTS = {
    "bug": lambda: RuntimeError("boom\\nsecond line"),
    "socket": lambda: BrokenPipeError(32, "Broken pipe"),
    "interrupt": KeyboardInterrupt,
}

def boom(args):
    print("partial output")
    raise FAULTS[args.fault]()

def register(subparsers):
    parser = subparsers.add_parser("boom", help="raise a planted exception")
    parser.add_argument("fault", choices=sorted(FAULTS), help="which exception")
    parser.set_defaults(func=boom)

module = types.ModuleType("boom_command")
module.register = register
sys.modules["boom_command"] = module
cli.COMMANDS["boom"] = "boom_command"
sys.exit(cli.main())
"""


def planted(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real `main` with the planted `boom` command."""
    return subprocess.run(
        [sys.executable, "-c", PLANTED, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_version_comes_from_the_package_metadata(cli: Cli) -> None:
    result = cli("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"shipyard {importlib.metadata.version('shipyard')}\n"


def test_a_bug_is_one_line_and_exit_1() -> None:
    result = planted("boom", "bug", env={"SHIPYARD_DEBUG": ""})
    assert result.returncode == 1
    assert result.stderr == (
        "error: RuntimeError: boom second line "
        "(a bug in shipyard; rerun with --debug for the traceback)\n"
    )
    assert result.stdout == "partial output\n"


@pytest.mark.parametrize(
    ("args", "env"),
    [(("--debug", "boom", "bug"), {}), (("boom", "bug"), {"SHIPYARD_DEBUG": "1"})],
    ids=["--debug", "SHIPYARD_DEBUG=1"],
)
def test_debug_shows_the_traceback(args: tuple[str, ...], env: dict[str, str]) -> None:
    result = planted(*args, env=env)
    assert result.returncode == 1
    assert result.stderr.startswith("Traceback (most recent call last):\n")
    assert "in boom\n" in result.stderr  # the frame that raised
    assert result.stderr.endswith("rerun with --debug for the traceback)\n")


def test_a_broken_socket_is_a_bug_not_a_closed_stdout() -> None:
    result = planted("boom", "socket", env={"SHIPYARD_DEBUG": ""})
    assert result.returncode == 1
    assert result.stderr.startswith("error: BrokenPipeError: [Errno 32] Broken pipe (a bug")


def test_ctrl_c_exits_130() -> None:
    result = planted("boom", "interrupt")
    assert (result.returncode, result.stderr) == (130, "interrupted\n")


def test_a_project_error_keeps_its_exit_code(cli: Cli) -> None:
    result = cli("artifact", "show", "0" * 64)
    assert result.returncode == 4
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr


def test_a_usage_error_exits_2(cli: Cli) -> None:
    result = cli("artifact", "ls", "--no-such-option")
    assert result.returncode == 2
    assert "unrecognized arguments: --no-such-option" in result.stderr


def test_a_reader_that_goes_away_ends_the_command_quietly(
    cli: Cli, shipyard_home: Path, tmp_path: Path
) -> None:
    """`shipyard artifact ls | head -1`: the reader is gone before the command writes."""
    (tmp_path / "a.txt").write_text("a")
    assert cli("artifact", "put", str(tmp_path / "a.txt"), "--kind", "dataset").returncode == 0
    read, write = os.pipe()
    os.close(read)  # no reader, ever: the first write fails whatever the timing
    try:
        result = subprocess.run(
            [sys.executable, "-m", "shipyard", "artifact", "ls"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write)
    assert (result.returncode, result.stderr) == (SIGPIPE_EXIT, "")
