"""Numbers on the command line: refused by argparse with a one-line usage error, never "a bug"."""

import argparse
import math
import subprocess
from collections.abc import Callable, Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shipyard.cli import argtypes
from shipyard.cli.main import build_parser

Cli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("ui", "--port", "99999"), "--port"),
        (("scheduler", "serve", "--config", "x.json", "--port", "-1"), "--port"),
        (("queue", "show", "99999999999999999999999"), "item"),
        (("queue", "requeue", "q", "1", "0"), "items"),
        (("data", "report", "latest", "--threshold", "nan"), "--threshold"),
        (("data", "report", "latest", "--threshold", "inf"), "--threshold"),
        (("sandbox", "run", "--timeout", "nan", "--", "true"), "--timeout"),
        (("eval", "contamination", "corpus", "--threshold", "nan"), "--threshold"),
        (("batch", "search-serve", "a", "--port", "65536"), "--port"),
        (("train", "run", "c.toml", "--nprocs", "1e3"), "--nprocs"),
    ],
)
def test_bad_numbers_are_usage_errors_naming_the_option(
    cli: Cli, args: tuple[str, ...], option: str
) -> None:
    result = cli(*args)
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert f"argument {option}" in last and "expected" in last
    assert "a bug" not in result.stderr and "Traceback" not in result.stderr


def _actions(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.Action]]:
    for action in parser._actions:
        yield parser.prog, action
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _actions(sub)


def test_no_command_takes_a_bare_int_or_float() -> None:
    bare = [
        f"{prog} {action.option_strings or action.dest}"
        for prog, action in _actions(build_parser())
        if action.type in (int, float)
    ]
    assert bare == []  # use shipyard.cli.argtypes: bounds, and no NaN or infinity


@pytest.mark.fuzz
@given(st.text(max_size=30))
def test_types_refuse_or_return_a_value_in_range(text: str) -> None:
    for parse, low, high in (
        (argtypes.port, 0, 65535),
        (argtypes.row_id, 1, argtypes.MAX_ID),
        (argtypes.fraction, 0.0, 1.0),
        (argtypes.positive, 0.0, math.inf),
    ):
        try:
            value = parse(text)
        except argparse.ArgumentTypeError as exc:
            assert "expected" in str(exc) and "\n" not in str(exc)
            continue
        assert math.isfinite(value) and low <= value <= high
    assert argtypes.port("0") == 0 and argtypes.port("65535") == 65535
    assert argtypes.fraction("1") == 1.0 and argtypes.row_id(str(argtypes.MAX_ID)) > 0
