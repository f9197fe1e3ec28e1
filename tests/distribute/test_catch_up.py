"""How far behind the swarm a peer is, and which connection a request takes while it catches up."""

from shipyard.distribute.catch_up import lane_for, pieces_behind
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
    assert [lane_for(open_lanes, True) for open_lanes in cases] == [0, 1, 0, 1]
    assert [lane_for(open_lanes, False) for open_lanes in cases] == [0, 0, 0, 0]
