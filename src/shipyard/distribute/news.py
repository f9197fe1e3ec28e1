"""`have` news: telling downstream peers at once that a piece is here, rather than leaving them
to hear of it at the next gossip round.

At most one notice is out to each peer. News that comes while one is out waits for its reply,
then goes in one more notice carrying the have-map as it is by then: a burst of pieces costs a
peer two requests instead of one per piece, and no news is later than one round trip.
"""

import asyncio
import contextlib
from collections.abc import Callable, Iterable

from shipyard.distribute.config import parse_address
from shipyard.distribute.context import Context
from shipyard.distribute.membership import encode_bits
from shipyard.distribute.wire import Header, request
from shipyard.errors import ShipyardError


class HaveNews:
    """The `have` notices of one artifact on this peer, to its downstream peers."""

    def __init__(self, ctx: Context, artifact: str, held: Callable[[], int]) -> None:
        self._ctx = ctx
        self._artifact = artifact
        self._held = held  # the artifact's have-map bits on this peer, as of now
        self._stale: dict[str, bool] = {}  # peer being told -> news came after its notice left
        self.tasks: set[asyncio.Task[None]] = set()

    def tell(self, peers: Iterable[str]) -> None:
        """Tell `peers` of the have-map now, or once their notice still out is answered."""
        for peer in peers:
            if peer in self._stale:
                self._stale[peer] = True
                continue
            self._stale[peer] = False
            task = asyncio.get_running_loop().create_task(self._notify(peer))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _notify(self, peer: str) -> None:
        cfg = self._ctx.config
        try:
            while True:
                self._stale[peer] = False
                # A peer that misses the news hears it from gossip.
                with contextlib.suppress(ShipyardError):
                    address, notice = parse_address(peer), self._notice()
                    await request(
                        address,
                        notice,
                        cfg.connect_timeout,
                        cfg.idle_timeout,
                        self._ctx.pool,
                        self._ctx.key,
                    )
                if not self._stale[peer]:
                    return
        finally:
            del self._stale[peer]

    def _notice(self) -> Header:
        return {
            "op": "have",
            "artifact": self._artifact,
            "from": self._ctx.membership.me,
            "have": encode_bits(self._held()),
        }
