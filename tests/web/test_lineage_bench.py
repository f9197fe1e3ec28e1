"""A small run of benchmarks/console_lineage.py, and its depth limit checked against a walk
of the same graph in Python."""

import importlib.util
import sys
from collections import deque
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from shipyard.httpguard import Guard
from shipyard.web import Console, create_app
from shipyard.web.artifacts import MAX_NODES

BENCH = Path(__file__).parents[2] / "benchmarks" / "console_lineage.py"


def _bench():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("console_lineage", BENCH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["console_lineage"] = module
    spec.loader.exec_module(module)
    return module


def test_small_benchmark_runs_through_a_real_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SHIPYARD_DB", raising=False)
    monkeypatch.setenv("SHIPYARD_HOME", "/nonexistent")  # run() points it at its temp home
    result = _bench().run(artifacts=300, edges=2000, queries=10, db=None)
    assert set(result) == {"up_p50_ms", "up_p95_ms", "down_p50_ms", "down_p95_ms"}
    assert all(value > 0 for value in result.values())


def test_depth_limited_lineage_matches_a_python_walk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SHIPYARD_DB", raising=False)
    monkeypatch.setenv("SHIPYARD_HOME", str(tmp_path))
    bench = _bench()
    ids = bench.build(f"sqlite:///{tmp_path / 'catalog.db'}", 400, 3000, seed=3)
    from shipyard.catalog import open_catalog

    catalog = open_catalog(f"sqlite:///{tmp_path / 'catalog.db'}")
    parents: dict[str, set[str]] = {}
    children: dict[str, set[str]] = {}
    for parent, child in catalog.db.rows("SELECT parent, child FROM edges"):  # type: ignore[attr-defined]
        parents.setdefault(child, set()).add(parent)
        children.setdefault(parent, set()).add(child)
    catalog.close()
    console = Console(tmp_path, Guard.start("console", tmp_path, "127.0.0.1"))
    with TestClient(create_app(console), base_url="http://127.0.0.1") as client:
        for root, direction, links in ((ids[-1], "up", parents), (ids[7], "down", children)):
            for depth in (1, 2, 5):
                reply = client.get(
                    f"/api/artifacts/{root}/lineage",
                    params={"direction": direction, "depth": depth},
                ).json()
                got = {n["id"]: n["level"] for n in reply["nodes"]}
                want = _walk(root, links, depth)
                assert reply["truncated"] == (len(want) > MAX_NODES)
                if reply["truncated"]:  # the nearest nodes are kept
                    assert len(got) == MAX_NODES and got.items() <= want.items()
                    left_out = [level for node, level in want.items() if node not in got]
                    assert max(got.values()) <= min(left_out)
                else:
                    assert got == want, (direction, depth)
                    edges = {(e["parent"], e["child"], e["depth"]) for e in reply["edges"]}
                    assert edges == _edges(want, links, direction, depth)
                    assert len(reply["edges"]) == len(edges)  # each edge once
                assert all(
                    (n["type"] == "run") == n["id"].startswith("run-") for n in reply["nodes"]
                )


def _walk(root: str, links: dict[str, set[str]], depth: int) -> dict[str, int]:
    seen = {root: 0}
    todo = deque([root])
    while todo:
        node = todo.popleft()
        if seen[node] == depth:
            continue
        for nxt in links.get(node, ()):
            if nxt not in seen:
                seen[nxt] = seen[node] + 1
                todo.append(nxt)
    return seen


def _edges(
    levels: dict[str, int], links: dict[str, set[str]], direction: str, depth: int
) -> set[tuple[str, str, int]]:
    """Each edge out of a node nearer than `depth`, at one more than that node's level."""
    out = set()
    for near, level in levels.items():
        if level < depth:
            for far in links.get(near, ()):
                edge = (far, near) if direction == "up" else (near, far)
                out.add((*edge, level + 1))
    return out
