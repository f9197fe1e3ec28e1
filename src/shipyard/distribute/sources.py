"""Where an artifact's pieces came from on one daemon: pieces and bytes per source (`origin`,
or a peer's HOST:PORT), counted as each verified piece is stored. `pull` reads the tally from
the daemon's status before and after it asks, and reports the difference."""

import base64
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


class PullSources:
    """Where one pull's pieces came from, across restarts of its daemon: each daemon's tally
    since it was first asked, summed. `restarted` is told every new daemon's tally at its first
    fetch reply, `seen` every later one."""

    def __init__(self) -> None:
        self._counted: dict[str, list[int]] = {}  # from daemons that have since restarted
        self._base: Any = None
        self._latest: Any = None

    def restarted(self, report: Any) -> None:
        self._add(since(self._base, self._latest))
        self._base = self._latest = report

    def seen(self, report: Any) -> None:
        if report is not None:
            self._latest = report

    def total(self) -> dict[str, tuple[int, int]]:
        total = PullSources()
        for added in (self._counted, since(self._base, self._latest)):
            total._add(added)
        return {source: (c[0], c[1]) for source, c in sorted(total._counted.items())}

    def _add(self, added: dict[str, list[int]]) -> None:
        for source, (pieces, nbytes) in added.items():
            counts = self._counted.setdefault(source, [0, 0])
            counts[0] += pieces
            counts[1] += nbytes


def held_before(bits: Any, sizes: dict[str, int], wanted: list[str] | None) -> tuple[int, int]:
    """Pieces and bytes of `wanted` (None: every piece) held when the have-map `bits` (base64,
    bit i for the i-th distinct piece of the manifest, as `sizes` orders them) was taken."""
    try:
        held = int.from_bytes(base64.b64decode(bits, validate=True), "little")
    except (TypeError, ValueError):
        return 0, 0
    chosen = set(sizes) if wanted is None else set(wanted)
    found = [h for i, h in enumerate(sizes) if h in chosen and (held >> i) & 1]
    return len(found), sum(sizes[h] for h in found)
