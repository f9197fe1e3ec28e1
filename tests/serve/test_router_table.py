"""Deployments in the router's table: canary split, mirroring, consecutive rollouts, names."""

from typing import Any

import pytest

from shipyard.errors import Conflict, NotFound
from shipyard.serve.router.policy import PrefixPolicy
from shipyard.serve.router.request import parse_request
from shipyard.serve.router.spec import parse_deployment
from shipyard.serve.router.table import Table, Unavailable


def version(name: str, weight: float, replicas: list[str], adapters: tuple[str, ...] = ()) -> Any:
    return {
        "version": name,
        "weight": weight,
        "replicas": [
            {"name": r, "url": f"http://127.0.0.1:{9000 + ord(r[0])}", "adapters": list(adapters)}
            for r in replicas
        ],
    }


def put(table: Table, name: str, *versions: Any, mirror: Any = None) -> Any:
    return table.put(parse_deployment(name, {"versions": list(versions), "mirror": mirror}))


def split(table: Table, name: str, n: int = 20_000) -> dict[str, int]:
    deployment = table.get(name)
    counts: dict[str, int] = {}
    for i in range(n):
        chosen = table.version_for(deployment, f"req-{i}", None).version
        counts[chosen] = counts.get(chosen, 0) + 1
    return counts


def test_the_split_follows_the_weights_and_the_request_id() -> None:
    table = Table(PrefixPolicy(0.25))
    put(table, "chat", version("v1", 0.95, ["a"]), version("v2", 0.05, ["b"]))
    counts = split(table, "chat")
    assert 0.04 < counts["v2"] / 20_000 < 0.06
    deployment = table.get("chat")
    again = [table.version_for(deployment, f"req-{i}", None).version for i in range(200)]
    assert again == [table.version_for(deployment, f"req-{i}", None).version for i in range(200)]


def test_a_put_replaces_the_whole_split_so_no_canary_route_leaks() -> None:
    table = Table(PrefixPolicy(0.25))
    put(table, "chat", version("v1", 0.75, ["a"]), version("v2", 0.25, ["b"]))
    table.get("chat").stats.version("v2").record(0.1, error=True)
    put(table, "chat", version("v2", 0.5, ["b"]), version("v3", 0.5, ["c"]))
    counts = split(table, "chat")
    assert set(counts) == {"v2", "v3"}  # v1 is gone, not kept at its old share
    assert table.get("chat").stats.version("v2").requests == 0  # counters restart at a PUT
    put(table, "chat", version("v3", 1.0, ["c"]))
    assert split(table, "chat", 2000) == {"v3": 2000}
    assert {s.name for s in table.replicas()} == {"c"}


def test_a_replica_named_again_keeps_its_in_flight_count_across_a_put() -> None:
    table = Table(PrefixPolicy(0.25))
    put(table, "chat", version("v1", 1, ["a"]))
    state = table.get("chat").replicas["v1"]["a"]
    state.in_flight = 3
    put(table, "chat", version("v1", 0.5, ["a"]), version("v2", 0.5, ["b"]))
    assert table.get("chat").replicas["v1"]["a"] is state and state.in_flight == 3


def test_mirroring_copies_about_the_fraction_to_the_shadow_only() -> None:
    table = Table(PrefixPolicy(0.25))
    put(
        table,
        "chat",
        version("v1", 1.0, ["a"]),
        version("v2", 0.0, ["b"]),
        mirror={"version": "v2", "fraction": 0.1},
    )
    deployment = table.get("chat")
    assert split(table, "chat", 2000) == {"v1": 2000}  # weight 0: only mirrored traffic
    shadows = [table.mirror_for(deployment, f"req-{i}", "v1", None) for i in range(10_000)]
    share = sum(s is not None for s in shadows) / len(shadows)
    assert 0.08 < share < 0.12
    assert {s.version for s in shadows if s is not None} == {"v2"}
    assert table.mirror_for(deployment, "x", "v2", None) is None  # never to itself


def test_models_resolve_to_deployments_and_adapters_and_unknown_names_are_named() -> None:
    table = Table(PrefixPolicy(0.25))
    put(table, "base", version("v1", 1, ["a"], adapters=("sql", "poet")))
    assert table.resolve("base")[1] is None
    deployment, adapter = table.resolve("sql")
    assert deployment.name == "base" and adapter == "sql"
    with pytest.raises(NotFound, match=r"'nope'.*deployments: base"):
        table.resolve("nope")
    with pytest.raises(NotFound, match="deployment 'gone' does not exist"):
        table.delete("gone")
    with pytest.raises(Conflict, match="adapter 'sql'"):
        put(table, "other", version("v1", 1, ["z"], adapters=("sql",)))
    with pytest.raises(Conflict, match="'poet'"):
        put(table, "poet", version("v1", 1, ["y"]))


def test_an_adapter_request_goes_only_to_versions_and_replicas_that_serve_it() -> None:
    table = Table(PrefixPolicy(0.25))
    put(
        table,
        "base",
        version("v1", 0.5, ["a"], adapters=("sql",)),
        version("v2", 0.5, ["b"]),
    )
    deployment = table.get("base")
    assert {table.version_for(deployment, f"r{i}", "sql").version for i in range(500)} == {"v1"}
    request = parse_request("completions", b'{"model": "sql", "prompt": "hi"}', {})
    state, _ = table.pick(deployment, "v1", request, "sql")
    assert state.name == "a"
    state.mark_down("connection refused")
    with pytest.raises(Unavailable, match=r"no healthy replica.*a: connection refused"):
        table.pick(deployment, "v1", request, "sql")
