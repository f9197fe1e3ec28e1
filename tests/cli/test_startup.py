"""The `shipyard` command imports each command's machinery only when that command runs: a
restarted peer daemon rejoins sooner when it does not first load the data pipeline."""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shipyard.cli.main import COMMANDS, build_parser

HEAVY = ("rich", "pyarrow", "duckdb", "tokenizers", "torch", "shipyard.data", "shipyard.train")


def loaded_by(command: str | None) -> set[str]:
    """The modules loaded by building the parser for `command` (None: every command)."""
    probe = (
        "import sys\n"
        "from shipyard.cli.main import build_parser\n"
        f"build_parser({command!r})\n"
        "print('\\n'.join(sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_building_the_parser_imports_no_heavy_package() -> None:
    heavy = [m for m in loaded_by(None) if any(m == h or m.startswith(h + ".") for h in HEAVY)]
    assert heavy == []


def commands_of(parser: argparse.ArgumentParser) -> set[str]:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return set(actions[0].choices)


def test_each_command_is_registered_by_the_module_the_table_names() -> None:
    assert commands_of(build_parser()) == set(COMMANDS)
    for command in COMMANDS:
        assert command in commands_of(build_parser(command))


def test_the_daemon_and_the_pull_client_load_apart() -> None:
    """A restarting daemon pays for neither the pull client nor the catalog it resolves aliases
    in; a pull pays for neither the daemon nor numpy."""
    peer, pull = loaded_by("peer"), loaded_by("pull")
    assert "shipyard.distribute.daemon" in peer
    assert not peer & {"shipyard.distribute.client", "shipyard.workspace", "shipyard.catalog"}
    assert "shipyard.distribute.client" in pull
    assert not pull & {"shipyard.distribute.daemon", "numpy"}


def test_the_peer_command_loads_numpy_without_blas_threads() -> None:
    """A BLAS thread per core, started as numpy is imported, was a third of the daemon's
    start-up CPU; the daemon does no linear algebra."""
    probe = (
        "import os, sys\n"
        "from shipyard.cli.main import build_parser\n"
        "build_parser('peer')\n"
        "print('numpy' in sys.modules, len(os.listdir('/proc/self/task')))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env
    ).stdout.split()
    assert out == ["True", "1"]


def test_the_start_benchmark_times_the_daemon_and_the_floor() -> None:
    script = Path(__file__).parents[2] / "benchmarks" / "peer_start.py"
    out = subprocess.run(
        [sys.executable, str(script), "--runs", "1"], capture_output=True, text=True, check=True
    ).stdout
    result = json.loads(out.splitlines()[-1])
    assert result["name"] == "peer_start"
    assert result["value"] > result["baseline"] > 0
    assert result["ratio"] == pytest.approx(result["value"] / result["baseline"], rel=0.05)
    assert result["cpu_s"] > result["baseline_cpu_s"] > 0
