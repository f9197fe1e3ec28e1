"""Who and what produced a run: the code version and the user, recorded with every run."""

import functools
import getpass
import os
import subprocess
from pathlib import Path

import shipyard


@functools.cache
def code_version() -> str:
    """`shipyard-<version>`, plus the git commit (and `-dirty`) when running from a checkout."""
    version = f"shipyard-{shipyard.__version__}"
    source = Path(shipyard.__file__).resolve().parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(source), "describe", "--always", "--dirty", "--abbrev=12"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return version
    return f"{version}+g{commit}" if commit else version


def current_user() -> str:
    return os.environ.get("SHIPYARD_USER") or getpass.getuser()
