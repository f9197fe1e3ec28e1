"""Daemon configuration and addresses are checked at the edge, naming what was wrong."""

import pytest

from shipyard.cli.main import main
from shipyard.distribute import DaemonConfig, parse_address
from shipyard.errors import InvalidInput


def test_addresses_parse_or_name_the_flag() -> None:
    assert parse_address("10.0.0.5:7000") == ("10.0.0.5", 7000)
    assert parse_address("[::1]:7000") == ("::1", 7000)
    for bad in ("10.0.0.5", "host:0", "host:99999", ":7000", "host:port"):
        with pytest.raises(InvalidInput, match="--listen"):
            parse_address(bad, "--listen")


def test_config_refuses_nonsense_limits() -> None:
    with pytest.raises(InvalidInput, match="max_inflight"):
        DaemonConfig(listen=("127.0.0.1", 1), store="/tmp/x", max_inflight=0)
    with pytest.raises(InvalidInput, match="catch_up_lag must be at least 1, got 0"):
        DaemonConfig(listen=("127.0.0.1", 1), store="/tmp/x", catch_up_lag=0)
    with pytest.raises(InvalidInput, match="dead_after"):
        DaemonConfig(listen=("127.0.0.1", 1), store="/tmp/x", dead_after=0)
    with pytest.raises(InvalidInput, match=r"origin_gateways must be 0 \(all\) or more, got -1"):
        DaemonConfig(listen=("127.0.0.1", 1), store="/tmp/x", origin_gateways=-1)
    with pytest.raises(InvalidInput, match="advertise"):
        DaemonConfig(listen=("0.0.0.0", 7000), store="/tmp/x")
    config = DaemonConfig(listen=("0.0.0.0", 7000), store="/tmp/x", advertise=("10.0.0.5", 7000))
    assert config.me == "10.0.0.5:7000"


def test_cli_reports_a_bad_seed_list() -> None:
    code = main(["peer", "serve", "--listen", "127.0.0.1:1", "--store", "x", "--seeds", "nope"])
    assert code == InvalidInput.exit_code


def test_the_default_request_count_is_what_the_mesh_lanes_take() -> None:
    # More would put requests on uplinks the mesh already fills; fewer would leave a lane a
    # single request, idle between pieces (docs/distribution.md, "Limits and defaults").
    config = DaemonConfig(listen=("127.0.0.1", 1), store="/tmp/x")
    assert config.max_inflight == config.mesh_degree * config.per_peer_inflight
