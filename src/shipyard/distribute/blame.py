"""Accountability for peers that fail the pieces they claim: local evidence, never gossiped.

A peer's have-map is a claim. When a request for a claimed piece is refused, cut off midway,
stalls, crawls below the minimum rate or brings bytes that fail the hash, this host stops
believing that one claim (for `RETRACT_FOR` seconds: an honest peer's bad moment must not hide
the only copy for ever). Then the evidence is weighed by kind:

- wrong bytes from the peer alone are proof, and cost its standing at once, for good;
- a refusal or a reply cut off midway is a strike, and a peer loses its standing at
  `STANDING_STRIKES` strikes more than pieces it delivered since;
- slowness (`slow`, `stalled`) is no strike: a daemon starved of CPU is slow too. It costs a
  peer its standing only on the terms of `shortfall`, and only for `shortfall.PAROLE` seconds.

A peer without standing is asked for nothing by this daemon, and its claims count for nothing.

Nothing here is ever sent to another peer: a liar could otherwise turn the swarm against
honest members by accusing them. Each daemon judges only what its own requests saw.
"""

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from shipyard.distribute.metrics import Metrics
from shipyard.distribute.shortfall import PAROLE, Shortfalls

# Why a claim failed: the reply said "not here", the connection ended mid-piece, no byte came
# for a whole idle timeout, bytes came slower than the minimum rate, or they failed the hash.
REASONS = ("refused", "truncated", "stalled", "slow", "corrupt")
SLOWNESS = ("stalled", "slow")  # weighed as shortfalls (see `shortfall`), never as strikes
STANDING_STRIKES = 3
RETRACT_FOR = 30.0  # seconds a failed claim is disbelieved on this host
# Failures against claimed holders after which a piece's owner takes it from the origin, as if
# no peer held it: however many liars claim it, their claims cost an owner this many requests.
ORIGIN_AFTER_FAILURES = 2


@dataclass(frozen=True)
class Blamed:
    """Why and when a peer lost its standing on this host, and until when (None: for good)."""

    reason: str
    detail: str
    at: float  # wall-clock seconds
    until: float | None = None  # wall-clock seconds


class Blame:
    """Claims retracted and standing lost, per peer, on this daemon (its event loop owns it)."""

    def __init__(
        self, me: str, metrics: Metrics, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.me = me
        self.metrics = metrics
        self.clock = clock
        self.blamed: dict[str, Blamed] = {}  # each peer's latest verdict, lapsed ones too
        self.shortfalls = Shortfalls()
        self.version = 0  # bumped when a claim is retracted or a standing changes: caches rebuild
        self._without: dict[str, float | None] = {}  # peers without standing: until (`clock`)
        self._strikes: dict[str, int] = {}
        self._retracted: dict[tuple[str, str], dict[int, float]] = {}  # (peer, artifact)
        self.metrics.set("shipyard_peer_blamed_peers", 0)

    def __contains__(self, peer: object) -> bool:
        """Whether `peer` is without standing on this host now."""
        if not isinstance(peer, str) or peer not in self._without:
            return False
        lapses = self._without[peer]
        if lapses is None or lapses > self.clock():
            return True
        del self._without[peer]  # a verdict of slowness ran out: asked again, on a fresh record
        self.shortfalls.forget(peer)
        self.version += 1
        self.metrics.set("shipyard_peer_blamed_peers", len(self))
        return False

    def __len__(self) -> int:
        return sum(peer in self for peer in list(self._without))

    def claim_failed(
        self, peer: str, artifact: str, index: int, reason: str, detail: str, strikes: int = 1
    ) -> None:
        """`peer` failed piece `index` of `artifact`, which it claimed: disbelieve that claim
        for a while, and count `strikes` (slowness: a shortfall instead)."""
        assert reason in REASONS, reason  # the metric's label set is fixed
        self.metrics.inc("shipyard_peer_claim_failures_total", reason=reason)
        now = self.clock()
        claims = self._retracted.setdefault((peer, artifact), {})
        claims[index] = now + RETRACT_FOR
        self.version += 1
        if reason in SLOWNESS:
            self.shortfalls.fell_short(peer, (artifact, index), reason, detail, now)
            self._judge_slowness(now)
            return
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

    def received(self, source: str, nbytes: int) -> None:
        """A reply from `source` (a peer, or the origin) ended after `nbytes` bytes, whatever
        became of them: the measure slowness is weighed by (see `shortfall`)."""
        self.shortfalls.received(source, nbytes, self.clock())

    def delivered(self, source: str) -> None:
        """A verified piece from `source` (a peer, or the origin): one strike fewer, and
        evidence that this host receives (see `shortfall`)."""
        now = self.clock()
        self.shortfalls.delivered(source, now)
        self._judge_slowness(now)
        if self._strikes.get(source, 0) > 0:
            self._strikes[source] -= 1

    def _judge_slowness(self, now: float) -> None:
        for peer, (reason, evidence) in self.shortfalls.convicted(now).items():
            self.lose_standing(peer, reason, evidence, PAROLE)

    def lose_standing(
        self, peer: str, reason: str, detail: str, lasting: float | None = None
    ) -> None:
        """Ask `peer` for nothing for `lasting` seconds (None: ever again); logged and counted
        once per verdict."""
        if peer in self and (self._without[peer] is None or lasting is not None):
            return  # without standing already, for at least as long
        detail = _printable(detail[:300])  # a peer's own words: no newlines or escapes in logs
        now = time.time()
        until = None if lasting is None else now + lasting
        self.blamed[peer] = Blamed(reason, detail, now, until)
        self._without[peer] = None if lasting is None else self.clock() + lasting
        self.shortfalls.forget(peer)
        for key in [k for k in self._retracted if k[0] == peer]:  # its claims count for nothing
            del self._retracted[key]
        self.version += 1
        self.metrics.inc("shipyard_peer_blamed_total", reason=reason)
        self.metrics.set("shipyard_peer_blamed_peers", len(self))
        how_long = "more" if lasting is None else f"for {lasting:.0f} s"
        print(
            f"peer {self.me}: blamed {peer} ({reason}): {detail}; it is asked for "
            f"nothing {how_long} by this daemon",
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
        """The peers blamed since this daemon started, for `status`: `until` is when a verdict
        of slowness lapses (wall clock; None: never), `standing` whether the peer has it now."""
        return [
            {
                "peer": peer,
                "reason": b.reason,
                "detail": b.detail,
                "at": round(b.at, 3),
                "until": None if b.until is None else round(b.until, 3),
                "standing": peer not in self,
            }
            for peer, b in self.blamed.items()
        ]


def _printable(text: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in text)
