"""State one daemon's parts share: its store, view of the swarm, origin, metrics and peer scores."""

import asyncio
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from shipyard.distribute.blame import Blame
from shipyard.distribute.catch_up import CATCH_UP_WIDTH, downstream_upload_slots
from shipyard.distribute.claims import PartialSources
from shipyard.distribute.config import DaemonConfig
from shipyard.distribute.membership import Membership
from shipyard.distribute.metrics import Metrics
from shipyard.distribute.origin import Origin
from shipyard.distribute.swarm_key import SwarmKey
from shipyard.distribute.trace import TransferTrace
from shipyard.distribute.transfer import Lanes
from shipyard.distribute.wire import Pool
from shipyard.store import PieceStore
from shipyard.store.partial import Partials

FAILURE_BACKOFF = 1.0  # seconds before asking a peer again after a request to it failed


@dataclass
class Context:
    config: DaemonConfig
    store: PieceStore
    membership: Membership
    origin: Origin | None
    metrics: Metrics = field(default_factory=Metrics)
    rng: random.Random = field(default_factory=random.Random)
    started: float = field(default_factory=time.monotonic)  # when the daemon came up
    array_rng: np.random.Generator = field(init=False)  # drawn from `rng`: seeded along with it
    blame: Blame = field(init=False)  # claims disbelieved and peers blamed (see `blame`)
    partial_sources: PartialSources = field(default_factory=PartialSources)
    # While a daemon that expects peers knows none alive (its seeds dead, say): piece bytes it
    # took from the origin meanwhile, held to `isolated_origin_budget` (see `Holding`).
    alone: bool = False
    origin_bytes_alone: int = 0
    load: dict[str, int] = field(default_factory=dict)  # open requests per peer, all artifacts
    avoid_until: dict[str, float] = field(default_factory=dict)  # peers busy or failing lately
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    pool: Pool = field(init=False)  # asyncio connections for the control plane
    lanes: Lanes = field(init=False)  # blocking connections for piece transfers
    transfers: ThreadPoolExecutor = field(init=False)  # piece downloads, hashing and writes
    partials: Partials = field(init=False)  # where downloads put the bytes as they come
    trace: TransferTrace | None = None  # where each stored piece came from, when asked for
    key: SwarmKey | None = None  # signs and checks every message, in a swarm with a key

    def __post_init__(self) -> None:
        self.array_rng = np.random.default_rng(self.rng.getrandbits(64))
        self.partials = Partials(self.store)
        self.pool = Pool(self.config.per_peer_inflight + 1)
        self.lanes = Lanes(self.config.connect_timeout, self.config.idle_timeout, self.key)
        # A thread per open request (peers, twice as many while catching up, and origin) and
        # per upload slot (those kept for downstream peers too), plus room to store finished
        # pieces, so a blocked transfer never delays writing a completed one.
        cfg = self.config
        uploads = cfg.upload_slots + downstream_upload_slots(cfg)
        workers = CATCH_UP_WIDTH * cfg.max_inflight + cfg.origin_inflight + uploads + 2
        self.transfers = ThreadPoolExecutor(workers, thread_name_prefix="transfer")
        self.blame = Blame(self.config.me, self.metrics)

    def close(self) -> None:
        """Close idle connections and the trace; running transfers finish or fail on their own
        sockets."""
        self.pool.close()
        self.lanes.close()
        self.transfers.shutdown(wait=False, cancel_futures=True)
        if self.trace:
            self.trace.close()

    def choosable(self, peers: list[str], now: float) -> list[str]:
        """Peers not recently found busy or failing."""
        return [p for p in peers if self.avoid_until.get(p, 0.0) <= now]

    def avoid(self, peer: str, seconds: float) -> None:
        self.avoid_until[peer] = time.monotonic() + seconds

    def peer_failed(self, peer: str, gone: bool) -> None:
        """A request to `peer` failed. A refused connection means its daemon is down: drop it
        from the view until it shows signs of life. Anything else (a timeout, a reset) may be a
        full queue on a busy link, and dropping the peer would reshuffle the mesh for nothing:
        leave it alone for a second instead."""
        self.metrics.inc("shipyard_peer_request_failures_total", source="peer")
        if gone:
            self.membership.fail(peer)
        else:
            self.avoid(peer, FAILURE_BACKOFF)
