"""What every console request reads from: the workspace, the training table, where services are.

SQLite connections belong to the thread that opened them, so each server thread keeps its own
workspace and run table, opened on first use and reused after.
"""

import threading
from dataclasses import dataclass, field
from pathlib import Path

from shipyard.httpguard import Guard
from shipyard.train import RunTable
from shipyard.workspace import Workspace


@dataclass
class Console:
    home: Path
    guard: Guard
    scheduler_url: str = "http://127.0.0.1:8642"
    peers: tuple[str, ...] = ()
    swarm_key_file: Path | None = None
    _local: threading.local = field(default_factory=threading.local, repr=False)

    def workspace(self) -> Workspace:
        ws: Workspace | None = getattr(self._local, "ws", None)
        if ws is None:
            ws = self._local.ws = Workspace.open(self.home)
            ws.note = lambda _text: None  # a server has no terminal to tell
        return ws

    def runs(self) -> RunTable:
        table: RunTable | None = getattr(self._local, "runs", None)
        if table is None:
            table = self._local.runs = RunTable()
        return table
