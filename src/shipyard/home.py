"""Where Shipyard keeps its state on this host: `$SHIPYARD_HOME`, default `~/.shipyard`.

The home holds the catalog, job commands and logs, tokens and audit logs, so it is private: made
0700, and an existing home of this user's that group/other could enter is tightened to 0700 with
a warning (once per process). A home another user owns is left alone; the files in it are checked
where they are read.
"""

import functools
import logging
import os
from pathlib import Path

from shipyard.secretfile import ensure_private_dir

log = logging.getLogger("shipyard.home")


def shipyard_home() -> Path:
    home = Path(os.environ.get("SHIPYARD_HOME", "~/.shipyard")).expanduser()
    _make_private(home)
    return home


@functools.cache
def _make_private(home: Path) -> None:
    try:
        tightened = ensure_private_dir(home)
    except OSError:
        return  # whatever opens a file in it names the failure, with the path
    if tightened:
        log.warning("%s was readable by other users; its mode is now 0700", home)
