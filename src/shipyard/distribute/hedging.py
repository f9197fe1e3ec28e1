"""Hedged requests: a request slow to finish is sent to a second holder as well.

A request whose bytes have been coming for `hedge_after` seconds (a quarter of that in the
endgame, when no piece is left to start) goes to one more holder, oldest first, while the peer
has requests to spare; the first copy to land is kept and the other cancelled. One slow or
stalled uplink then delays a piece by the patience, not by its own pace.
"""

import time
from collections.abc import Mapping

from shipyard.distribute.context import Context
from shipyard.distribute.picker import Availability, choose_peer
from shipyard.distribute.transfer import Transfer


def hedges(
    inflight: Mapping[int, list[Transfer]],
    avail: Availability,
    ctx: Context,
    budget: int,
    endgame: bool,
) -> list[tuple[int, str]]:
    """Up to `budget` (piece, peer) requests duplicating the slow ones in `inflight`."""
    cfg = ctx.config
    patience = cfg.hedge_after / 4 if endgame else cfg.hedge_after
    now = time.monotonic()
    load = dict(ctx.load)  # counting the hedges picked here as they would be once started
    picks: list[tuple[int, str]] = []
    for index, transfers in sorted(inflight.items(), key=lambda t: -t[1][0].age(now)):
        if len(picks) >= budget:
            break
        if len(transfers) > 1 or transfers[0].age(now) < patience:
            continue
        busy = {t.source for t in transfers}
        others = ctx.choosable([m for m in avail.holders(index) if m not in busy], now)
        peer = choose_peer(others, load, cfg.per_peer_inflight, ctx.rng)
        if peer is not None:
            load[peer] = load.get(peer, 0) + 1
            picks.append((index, peer))
    return picks
