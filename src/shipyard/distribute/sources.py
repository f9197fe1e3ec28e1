"""Where an artifact's pieces came from on one daemon: pieces and bytes per source (`origin`,
or a peer's HOST:PORT), counted as each verified piece is stored. `pull` reads the tally from
the daemon's status before and after it asks, and reports the difference."""

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Sources:
    tally: dict[str, list[int]] = field(default_factory=dict)  # source: [pieces, bytes]

    def add(self, source: str, nbytes: int) -> None:
        counts = self.tally.setdefault(source, [0, 0])
        counts[0] += 1
        counts[1] += nbytes

    def report(self) -> dict[str, list[int]]:
        """{source: [pieces, bytes]}, as `status` replies carry it."""
        return {source: list(counts) for source, counts in self.tally.items()}


def since(before: Any, after: Any) -> dict[str, list[int]]:
    """What `after` (a `report()`) added to `before`: sources with no new piece are left out.
    Anything that is not a well-formed report counts as empty (a daemon of an older version)."""
    start, end = _checked(before), _checked(after)
    added = {}
    for source, (pieces, nbytes) in end.items():
        old = start.get(source, [0, 0])
        if pieces > old[0]:
            added[source] = [pieces - old[0], nbytes - old[1]]
    return added


def _checked(report: Any) -> dict[str, list[int]]:
    if not isinstance(report, dict):
        return {}
    return {
        str(source): [int(counts[0]), int(counts[1])]
        for source, counts in report.items()
        if isinstance(counts, list)
        and len(counts) == 2
        and all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts)
    }
