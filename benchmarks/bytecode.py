"""Byte-compile the shipyard package before a benchmark starts daemons from it."""

import compileall
from pathlib import Path

import shipyard


def compile_shipyard() -> None:
    """Write the bytecode of every shipyard module, as installing it from a wheel does. Where
    PYTHONDONTWRITEBYTECODE is set (as on this machine), an editable install never keeps any,
    and every daemon started would compile each module again: about a sixth of its start-up
    time, which a restarted host pays on a busy machine before it rejoins."""
    compileall.compile_dir(Path(shipyard.__file__).parent, quiet=1)
