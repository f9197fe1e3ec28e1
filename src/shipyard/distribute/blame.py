"""Accountability for peers that fail the pieces they claim: local evidence, never gossiped.

A peer's have-map is a claim. When a request for a claimed piece is refused, cut off midway,
stalls, crawls below the minimum rate or brings bytes that fail the hash, this host stops
believing that one claim (for `RETRACT_FOR` seconds: an honest peer's bad moment must not hide
the only copy for ever) and gives the peer a strike. Wrong bytes from the peer alone are proof,
and cost its standing at once; anything else may be a busy link, so a peer loses its standing
only at `STANDING_STRIKES` strikes more than pieces it delivered since. A peer without standing
is asked for nothing again by this daemon, and its claims count for nothing.

Nothing here is ever sent to another peer: a liar could otherwise turn the swarm against
honest members by accusing them. Each daemon judges only what its own requests saw.
"""

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from shipyard.distribute.metrics import Metrics

# Why a claim failed: the reply said "not here", the connection ended mid-piece, no byte came
# for a whole idle timeout, bytes came slower than the minimum rate, or they failed the hash.
REASONS = ("refused", "truncated", "stalled", "slow", "corrupt")
STANDING_STRIKES = 3
RETRACT_FOR = 30.0  # seconds a failed claim is disbelieved on this host
# Failures against claimed holders after which a piece's owner takes it from the origin, as if
# no peer held it: however many liars claim it, their claims cost an owner this many requests.
ORIGIN_AFTER_FAILURES = 2


@dataclass(frozen=True)
class Blamed:
    """Why and when a peer lost its standing on this host."""

    reason: str
    detail: str
    at: float  # wall-clock seconds


class Blame:
    """Claims retracted and standing lost, per peer, on this daemon (its event loop owns it)."""

    def __init__(
        self, me: str, metrics: Metrics, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.me = me
        self.metrics = metrics
        self.clock = clock
        self.blamed: dict[str, Blamed] = {}
        self.version = 0  # bumped when a claim is retracted or a peer blamed: caches rebuild
        self._strikes: dict[str, int] = {}
        self._retracted: dict[tuple[str, str], dict[int, float]] = {}  # (peer, artifact)
        self.metrics.set("shipyard_peer_blamed_peers", 0)

    def __contains__(self, peer: object) -> bool:
        return peer in self.blamed

    def __len__(self) -> int:
        return len(self.blamed)

    def claim_failed(
        self, peer: str, artifact: str, index: int, reason: str, detail: str, strikes: int = 1
    ) -> None:
        """`peer` failed piece `index` of `artifact`, which it claimed: disbelieve that claim
        for a while and count `strikes`."""
        assert reason in REASONS, reason  # the metric's label set is fixed
        self.metrics.inc("shipyard_peer_claim_failures_total", reason=reason)
        claims = self._retracted.setdefault((peer, artifact), {})
        claims[index] = self.clock() + RETRACT_FOR
        self.version += 1
        total = self._strikes.get(peer, 0) + strikes
        self._strikes[peer] = total
        if total >= STANDING_STRIKES:
            self.lose_standing(peer, reason, detail)

    def corrupt(self, peers: list[str], artifact: str, index: int, detail: str) -> None:
        """The piece's bytes, written by `peers`, failed its hash. One writer alone is proven
        wrong and loses its standing; of several, each gets a strike, since an honest peer's
        bytes may have been finished by a liar's."""
        strikes = STANDING_STRIKES if len(peers) == 1 else 1
        for peer in peers:
            self.claim_failed(peer, artifact, index, "corrupt", detail, strikes)

    def delivered(self, peer: str) -> None:
        """A verified piece from `peer`: one strike fewer."""
        if self._strikes.get(peer, 0) > 0:
            self._strikes[peer] -= 1

    def lose_standing(self, peer: str, reason: str, detail: str) -> None:
        """Ask `peer` for nothing again; logged and counted once per peer."""
        if peer in self.blamed:
            return
        detail = _printable(detail[:300])  # a peer's own words: no newlines or escapes in logs
        self.blamed[peer] = Blamed(reason, detail, time.time())
        for key in [k for k in self._retracted if k[0] == peer]:  # its claims count for nothing
            del self._retracted[key]
        self.version += 1
        self.metrics.inc("shipyard_peer_blamed_total", reason=reason)
        self.metrics.set("shipyard_peer_blamed_peers", len(self.blamed))
        print(
            f"peer {self.me}: blamed {peer} ({reason}): {detail}; it is asked for "
            "nothing more by this daemon",
            file=sys.stderr,
            flush=True,
        )

    def retracted(self, peer: str, artifact: str) -> int:
        """The pieces of `artifact` whose claims by `peer` are disbelieved now, as bits."""
        claims = self._retracted.get((peer, artifact))
        if not claims:
            return 0
        now = self.clock()
        for index in [i for i, until in claims.items() if until <= now]:
            del claims[index]
        return sum(1 << i for i in claims)

    def report(self) -> list[dict[str, object]]:
        """The blamed peers, for `status`."""
        return [
            {"peer": peer, "reason": b.reason, "detail": b.detail, "at": round(b.at, 3)}
            for peer, b in self.blamed.items()
        ]


def _printable(text: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in text)
