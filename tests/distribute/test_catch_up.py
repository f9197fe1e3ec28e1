"""How far behind the swarm a peer is, how many requests it keeps open for that, and which
connection a request takes."""

from shipyard.distribute.catch_up import CATCH_UP_WIDTH, Pace, lane_for, pace, pieces_behind
from shipyard.distribute.config import DaemonConfig
from shipyard.distribute.membership import HaveMap
from shipyard.distribute.picker import Availability

ME = "10.0.0.1:7000"


def _bits(count: int) -> int:
    return (1 << count) - 1


def test_pieces_behind_counts_from_the_median_of_the_other_members() -> None:
    haves = {ME: HaveMap(True, _bits(2))}
    haves |= {f"10.0.0.{i}:7000": HaveMap(True, _bits(n)) for i, n in [(2, 10), (3, 12), (4, 30)]}
    assert pieces_behind(Availability(haves, 32), ME, 2) == 10  # the median of 10, 12, 30
    # A peer ahead of the median is behind by a negative count.
    assert pieces_behind(Availability(haves, 32), ME, 20) == -8


def test_pieces_behind_without_itself_or_anyone_in_view() -> None:
    others = {"10.0.0.2:7000": HaveMap(True, _bits(6))}
    assert pieces_behind(Availability(others, 8), ME, 0) == 6  # it holds nothing to show yet
    assert pieces_behind(Availability({ME: HaveMap(True, 0)}, 8), ME, 0) == 0


def test_a_peer_catching_up_spreads_its_requests_over_two_connections() -> None:
    cases = ([], [0], [0, 1], [0, 0, 1])
    assert [lane_for(open_lanes, 2) for open_lanes in cases] == [0, 1, 0, 1]
    assert [lane_for(open_lanes, 1) for open_lanes in cases] == [0, 0, 0, 0]


def test_the_pace_widens_behind_the_median_and_narrows_ahead_of_it() -> None:
    config = DaemonConfig(("10.0.0.1", 7000), "/tmp/x", catch_up_lag=3)
    depth, total = config.per_peer_inflight, config.max_inflight
    level = Pace(depth, 1, total)
    assert pace(config, 0.0) == pace(config, 2.5) == pace(config, -2.5) == level
    assert pace(config, 3.0) == Pace(2 * depth, CATCH_UP_WIDTH, 2 * total)
    assert pace(config, -3.0) == Pace(depth - 1, 1, total * (depth - 1) // depth)
    # One request per lane is the least: a peer ahead never stops asking.
    single = DaemonConfig(("10.0.0.1", 7000), "/tmp/x", per_peer_inflight=1, max_inflight=4)
    assert pace(single, -40.0) == Pace(1, 1, 4)
