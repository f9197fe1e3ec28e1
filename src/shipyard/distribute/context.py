"""State one daemon's parts share: its store, view of the swarm, origin, metrics and peer scores."""

import asyncio
import random
from dataclasses import dataclass, field

from shipyard.distribute.config import DaemonConfig
from shipyard.distribute.membership import Membership
from shipyard.distribute.metrics import Metrics
from shipyard.distribute.origin import Origin
from shipyard.store import PieceStore


@dataclass
class Context:
    config: DaemonConfig
    store: PieceStore
    membership: Membership
    origin: Origin | None
    metrics: Metrics = field(default_factory=Metrics)
    rng: random.Random = field(default_factory=random.Random)
    blamed: set[str] = field(default_factory=set)
    load: dict[str, int] = field(default_factory=dict)  # open requests per peer, all artifacts
    rate: dict[str, float] = field(default_factory=dict)  # recent bytes/s per peer
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.metrics.set("shipyard_peer_blamed_peers", 0)

    def blame(self, peer: str) -> None:
        """`peer` sent bytes that failed verification: never ask it for anything again."""
        self.blamed.add(peer)
        self.metrics.set("shipyard_peer_blamed_peers", len(self.blamed))

    def observe_rate(self, peer: str, nbytes: int, seconds: float) -> None:
        sample = nbytes / max(seconds, 1e-3)
        self.rate[peer] = 0.7 * self.rate.get(peer, sample) + 0.3 * sample
