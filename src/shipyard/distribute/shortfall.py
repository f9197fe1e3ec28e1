"""Slowness as evidence: when pieces that crawl or stall cost a peer its standing.

From the requesting end, a liar trickling a byte a second and an honest daemon starved of CPU
look alike for a while: a process that is not scheduled for two seconds sends nothing for two
seconds, and its replies are cut off below the minimum rate just as the liar's are. They differ
over a longer stretch: the starved daemon sends at its link's speed whenever it runs, so over
`WINDOW` seconds it sends a fair share of what other sources send this host, while a trickle
sends next to nothing however long it is watched. And a host that is itself starved receives
little from everyone, so its own state is no evidence against anyone.

So a reply below the minimum rate (`slow`) or with no byte for an idle timeout (`stalled`) is
a *shortfall*: the claim is retracted at once, so the piece goes elsewhere, but the peer loses
its standing only when, within the last `WINDOW` seconds,

- it fell short on `SHORTFALLS` distinct pieces (repeated, not one bad moment);
- this host stored a verified piece from another source (it could receive); and
- the bytes it sent this host, in every reply that ended in the window, cut off or not, were
  at most a `RATIO`-th of what the median source that delivered a verified piece sent (it sent
  next to nothing). Only such sources set the measure, so liars that send nothing cannot drag
  it down to their own level.

Evidence older than `WINDOW` is forgotten, and the verdict itself lapses after `PAROLE`
seconds: slowness is never proof the way a failed hash is, so a peer blamed for it is asked
again later, on a fresh record.
"""

import statistics
from collections import deque
from collections.abc import Hashable
from typing import Generic, TypeVar

WINDOW = 10.0  # seconds of evidence weighed
SHORTFALLS = 3  # distinct pieces a peer must fall short on within the window
# A peer stopped for all but a 64th of the window, or with a link 64 times slower than the
# median source's, is spared; a trickle of a byte a second is millions of times short.
RATIO = 64
PAROLE = 60.0  # seconds a verdict of slowness lasts

E = TypeVar("E")


class _Recent(Generic[E]):
    """Events per source, each with its time, pruned to the last `WINDOW` seconds."""

    def __init__(self) -> None:
        self.by_source: dict[str, deque[tuple[float, E]]] = {}

    def add(self, source: str, now: float, event: E) -> None:
        self.by_source.setdefault(source, deque()).append((now, event))
        self._prune(source, now)  # each source's own events: memory stays bounded

    def prune(self, now: float) -> None:
        for source in list(self.by_source):
            self._prune(source, now)

    def _prune(self, source: str, now: float) -> None:
        events = self.by_source[source]
        while events and events[0][0] < now - WINDOW:
            events.popleft()
        if not events:
            del self.by_source[source]

    def of(self, source: str) -> list[E]:
        return [event for _, event in self.by_source.get(source, ())]


class Shortfalls:
    """Shortfalls, bytes received and verified pieces per source on one daemon, over the last
    `WINDOW` seconds. Sources are peers and the origin."""

    def __init__(self) -> None:
        self._short: _Recent[tuple[Hashable, str, str]] = _Recent()  # piece, reason, detail
        self._bytes: _Recent[int] = _Recent()  # bytes of each reply, when it ended
        self._pieces: _Recent[None] = _Recent()  # pieces that passed their hash

    def received(self, source: str, nbytes: int, now: float) -> None:
        """A reply from `source` ended (delivered, failed or cut off) after `nbytes` bytes."""
        self._bytes.add(source, now, nbytes)

    def delivered(self, source: str, now: float) -> None:
        """A piece from `source` passed its hash."""
        self._pieces.add(source, now, None)

    def fell_short(self, peer: str, piece: Hashable, reason: str, detail: str, now: float) -> None:
        """`peer` failed `piece` by slowness (`reason`, in `detail`)."""
        self._short.add(peer, now, (piece, reason, detail))

    def convicted(self, now: float) -> dict[str, tuple[str, str]]:
        """The peers whose shortfalls now cost their standing: the reason and the evidence, in
        words. Asked after each shortfall and each verified piece, so the evidence that
        completes a case (another source's piece, say) counts at once."""
        for recent in (self._short, self._bytes, self._pieces):
            recent.prune(now)
        verdicts = {}
        for peer in self._short.by_source:
            evidence = self._evidence(peer)
            if evidence is not None:
                _, reason, detail = self._short.of(peer)[-1]
                verdicts[peer] = reason, f"{evidence}; the last: {detail}"
        return verdicts

    def _evidence(self, peer: str) -> str | None:
        pieces = len({piece for piece, _, _ in self._short.of(peer)})
        good = [s for s in self._pieces.by_source if s != peer]  # sources that delivered
        if pieces < SHORTFALLS or not good:
            return None
        sent = sum(self._bytes.of(peer))
        typical = statistics.median(sum(self._bytes.of(s)) for s in good)
        if sent * RATIO > typical:
            return None
        return (
            f"short on {pieces} pieces in {WINDOW:.0f} s, sending {sent} bytes while the "
            f"median of {len(good)} sources that delivered pieces sent {typical:.0f}"
        )

    def forget(self, peer: str) -> None:
        """Start `peer`'s record afresh (a verdict was given, or has lapsed)."""
        self._short.by_source.pop(peer, None)
        self._bytes.by_source.pop(peer, None)
