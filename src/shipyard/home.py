"""Where Shipyard keeps its state on this host: `$SHIPYARD_HOME`, default `~/.shipyard`."""

import os
from pathlib import Path


def shipyard_home() -> Path:
    return Path(os.environ.get("SHIPYARD_HOME", "~/.shipyard")).expanduser()
