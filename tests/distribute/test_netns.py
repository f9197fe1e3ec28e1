"""The fan-out benchmark's namespace rig, small: real namespaces, veth, a bridge and tc caps."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).parents[2] / "benchmarks" / "fanout.py"
FLOOR = Path(__file__).parents[2] / "benchmarks" / "fanout_floor.py"
REPEAT = Path(__file__).parents[2] / "benchmarks" / "fanout_repeat.py"

pytestmark = [
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("tc") is None, reason="needs root and iproute2"
    ),
]


def namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


def run_bench(*flags: str) -> dict[str, object]:
    before = namespaces()
    done = subprocess.run(
        [sys.executable, str(BENCH), "--hosts", "4", "--size-mib", "12", "--rate-mbit", "200",
         "--baseline-size-mib", "4", *flags],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert namespaces() == before  # every namespace (and its links) was removed
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_swarm_over_shaped_namespaces_beats_origin_only() -> None:
    result = run_bench()
    assert result["name"] == "fanout"
    assert float(result["origin_bytes_ratio"]) <= 1.2
    assert float(result["value"]) >= 1.0  # no host beats size / link rate
    # The clock runs to each pull's written file, which comes after its store is complete; the
    # cold run (daemons started with the pulls) cannot beat the link either.
    assert float(result["t_stores_s"]) <= float(result["t_shipyard_s"])
    assert float(result["cold_value"]) >= 1.0
    assert float(result["baseline"]) >= 3.0  # four hosts share one origin link
    # The link meter: no link beyond its rate, and every byte a host downloaded was uploaded
    # by another host or the origin (4 hosts at 200 Mbit/s, the origin at 100).
    down, up = float(result["host_download_use"]), float(result["host_upload_use"])
    origin_use = float(result["origin_upload_use"])
    assert 0.0 < down <= 1.05 and 0.0 < origin_use <= 1.05
    assert 4 * 200 * down == pytest.approx(4 * 200 * up + 100 * origin_use, rel=0.1)
    if shutil.which("aria2c"):  # the BitTorrent baseline ran on the same hosts and finished
        assert float(result["aria2_baseline"]) >= 1.0
        assert float(result["aria2_origin_wire_ratio"]) >= 1.0  # the origin seeded a copy


def test_chaos_survivors_complete_and_restarted_hosts_resume() -> None:
    result = run_bench("--chaos", "--no-baseline", "--trace")
    assert any("killed" in str(e) for e in result["events"])
    assert result["restarted_hosts_refetched_pieces"] == 0
    hops: dict[str, Any] = result["hops"]  # type: ignore[assignment]
    assert hops["copies"] >= 3 * 12  # 12 pieces on each of the 3 hosts alive at the end, at least
    assert hops["depths"]["0"]["share"] > 0  # JSON keys: some copies came from the origin
    assert hops["hop"]["transfer"]["median"] > 0
    restarts: list[dict[str, Any]] = result["restarts"]  # type: ignore[assignment]
    assert len(restarts) == 1  # of the one or two hosts killed, one was brought back
    assert restarts[0]["first_piece_after_restart_s"] > 0 and restarts[0]["pieces_per_s_after"] > 0


def test_repeated_runs_report_their_median() -> None:
    done = subprocess.run(
        [sys.executable, str(REPEAT), "--runs", "3", "--pause", "0", "--hosts", "3",
         "--size-mib", "8", "--rate-mbit", "200", "--baseline-size-mib", "4", "--no-aria2"],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    values = [float(v) for v in result["values"]]
    assert len(values) == 3 and result["hosts"] == 3
    median = sorted(values)[1]
    assert float(result["value"]) == median and min(values) >= 1.0
    assert float(result["baseline"]) >= 2.0  # three hosts share one origin link
    assert float(result["ratio"]) == pytest.approx(float(result["baseline"]) / median, abs=0.01)


def test_rig_floor_small() -> None:
    """The rig without the swarm: bulk flows cannot beat the link, requests cannot exceed it."""
    before = namespaces()
    results = []
    for mode in ("bulk", "pieces", "pairs"):
        done = subprocess.run(
            [sys.executable, str(FLOOR), "--mode", mode, "--hosts", "3", "--flows", "2",
             "--size-mib", "8", "--seconds", "2", "--rate-mbit", "200"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert namespaces() == before
    bulk, pieces, pairs = results
    assert float(bulk["value"]) >= 1.0
    assert 0.0 < float(pieces["value"]) <= 1.0 and 0.0 < float(pairs["value"]) <= 1.0
