"""Keeping level: a peer that has fallen behind the swarm takes a larger share of the uplinks it
fetches from, and one ahead of it a smaller share.

Each upstream peer's uplink is shared by the connections of the peers it serves, and TCP shares
a link evenly between connections. A peer whose upstream peers' uplinks also carry more than
their share of other traffic gets less than its own link's rate, and on the benchmark's rig such
a peer stayed behind for the whole run (4.6 pieces a second against the median's 4.85 at 32
hosts), finishing seconds after the rest: and the last peer sets the time of the whole rollout.
So a peer fetching a whole artifact `catch_up_lag` pieces or more behind the median live member
keeps twice the requests open, on a second connection to each peer it asks, until it is level
again: two shares of each uplink instead of one. A second connection without the extra requests
lost the pipelining on both and did not help; nor did extra requests queued on the one
connection (measured side by side; see the git history of docs/distribution.md).

A peer as far ahead of the median keeps one request fewer on each lane. Its connections then
pause between pieces, and in those pauses its upstream peers' uplinks carry their other
downstream peers' pieces, the ones behind. With every lane kept full (three requests deep),
every downlink runs close to its rate, and a peer behind gains little by its own requests alone.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from shipyard.distribute.config import DaemonConfig
from shipyard.distribute.picker import Availability

CATCH_UP_WIDTH = 2  # connections to each peer, and times the requests, while catching up


@dataclass(frozen=True)
class Pace:
    """How many requests a peer keeps open to each peer it asks, on how many connections to
    each (lanes), and in all."""

    per_peer: int
    lanes: int
    total: int


def downstream_upload_slots(config: DaemonConfig) -> int:
    """Upload slots a peer keeps for its downstream peers in the mesh: one for each lane they may
    open to it, two each while catching up."""
    return config.mesh_degree * CATCH_UP_WIDTH


def pace(config: DaemonConfig, behind: float) -> Pace:
    """The pace of a peer fetching a whole artifact `behind` pieces behind the median live
    member (negative: ahead of it)."""
    depth, total = config.per_peer_inflight, config.max_inflight
    if behind >= config.catch_up_lag:
        return Pace(depth * CATCH_UP_WIDTH, CATCH_UP_WIDTH, total * CATCH_UP_WIDTH)
    if behind <= -config.catch_up_lag and depth > 1:
        return Pace(depth - 1, 1, total * (depth - 1) // depth)
    return Pace(depth, 1, total)


def pieces_behind(avail: Availability, me: str, held: int) -> float:
    """How many pieces `held` falls short of the median live holder other than `me` (0 when
    there is none)."""
    counts = avail.member_counts
    mine = avail.row(me)
    others = np.delete(counts, mine) if mine >= 0 else counts
    return float(np.median(others)) - held if len(others) else 0.0


def lane_for(open_lanes: Sequence[int], lanes: int) -> int:
    """Which of `lanes` connections to a peer carries one more request to it, given the lanes
    of the requests open to it: the one carrying fewest, the first on a tie."""
    return min(range(lanes), key=lambda lane: (list(open_lanes).count(lane), lane))
