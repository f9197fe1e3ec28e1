"""What a daemon was asked to fetch and has not finished, kept in its store.

A daemon killed mid-download and brought back (by systemd, a crash loop, a reboot) reads these
records at start and carries on at once from the verified pieces on its disk: it does not wait
for a `shipyard pull` to notice the restart and ask again. A record is written before the fetch
is acknowledged and removed once every wanted piece is held.

Layout: `wants/<artifact id>` holds `{"pieces": null}` (the whole artifact) or
`{"pieces": [piece hash, ...]}` (the pieces asked for, a tensor slice say).
"""

import json
import sys

from shipyard.store.backend import Backend

WANTS = "wants/"

Wanted = list[str] | None  # piece hashes, or None for the whole artifact


class WantLog:
    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def record(self, artifact: str, pieces: Wanted) -> None:
        """Keep `pieces` as what this daemon wants of `artifact` (replacing an older record)."""
        body = json.dumps({"pieces": sorted(pieces) if pieces is not None else None})
        self.backend.put(WANTS + artifact, body.encode())

    def clear(self, artifact: str) -> None:
        self.backend.delete(WANTS + artifact)  # no record is fine too

    def pending(self) -> dict[str, Wanted]:
        """Every readable record. One that cannot be read is named on stderr and left in place
        for a person to look at: it costs a resume, never the pieces on disk."""
        wants: dict[str, Wanted] = {}
        for info in self.backend.list(WANTS):
            artifact = info.key.removeprefix(WANTS)
            try:
                wants[artifact] = _parse(self.backend.get(info.key))
            except ValueError as exc:
                print(f"want record {info.key}: {exc}; not resumed", file=sys.stderr, flush=True)
        return wants


def _parse(data: bytes) -> Wanted:
    record = json.loads(data)  # a JSONDecodeError is a ValueError
    if isinstance(record, dict) and "pieces" in record:
        pieces = record["pieces"]
        if pieces is None or (isinstance(pieces, list) and all(isinstance(p, str) for p in pieces)):
            return pieces
    raise ValueError('not {"pieces": null} or {"pieces": [piece hash, ...]}')
