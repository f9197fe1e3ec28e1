"""Catching up: a peer that has fallen behind the swarm takes a larger share of the uplinks it
fetches from.

Each upstream peer's uplink is shared by the connections of the peers it serves, and TCP shares
a link evenly between connections. A peer whose upstream peers' uplinks also carry more than
their share of other traffic gets less than its own link's rate, and on the benchmark's rig such
a peer stayed behind for the whole run (4.6 pieces a second against the median's 4.85 at 32
hosts), finishing seconds after the rest: and the last peer sets the time of the whole rollout.
So a peer fetching a whole artifact `catch_up_lag` pieces or more behind the median live member
keeps twice the requests open, on a second connection to each peer it asks, until it is level
again: two shares of each uplink instead of one. A second connection without the extra requests
lost the pipelining on both and did not help; nor did extra requests queued on the one
connection (docs/distribution-history.md, fourteenth and fifteenth sessions).
"""

from collections.abc import Sequence

import numpy as np

from shipyard.distribute.picker import Availability

CATCH_UP_WIDTH = 2  # connections to each peer, and times the requests, while catching up


def pieces_behind(avail: Availability, me: str, held: int) -> float:
    """How many pieces `held` falls short of the median live holder other than `me` (0 when
    there is none)."""
    counts = avail.member_counts
    mine = avail.row(me)
    others = np.delete(counts, mine) if mine >= 0 else counts
    return float(np.median(others)) - held if len(others) else 0.0


def lane_for(open_lanes: Sequence[int], catching_up: bool) -> int:
    """The connection for one more request to a peer that has requests open on `open_lanes`:
    the first, or while catching up whichever of the two carries fewer."""
    if not catching_up:
        return 0
    return min(range(CATCH_UP_WIDTH), key=lambda lane: (list(open_lanes).count(lane), lane))
