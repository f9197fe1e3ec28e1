"""Transfer traces (`peer serve --trace`) and the hop summary read from them."""

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shipyard.distribute import pull
from shipyard.distribute.trace import TransferTrace, hop_summary, read_traces
from shipyard.errors import InvalidInput, ShipyardError
from shipyard.store import Manifest

from .conftest import free_port


def record(peer: str, source: str, requested: float, first_byte: float | None, stored: float,
           piece: int = 0) -> dict[str, Any]:  # fmt: skip
    return {
        "peer": peer,
        "artifact": "a",
        "piece": piece,
        "from": source,
        "lane": 0,
        "requested": requested,
        "first_byte": first_byte,
        "stored": stored,
    }


def test_a_chain_of_copies_gives_each_hop_and_its_parts() -> None:
    records = [
        record("g", "origin", 0.0, None, 1.0),  # the gateway's copy, the first one
        record("a", "g", 1.1, 1.3, 1.6),  # noticed 0.1 s after, waited 0.2, took 0.3
        record("b", "a", 1.8, 1.9, 2.4),  # noticed 0.2 s after, waited 0.1, took 0.5
    ]
    summary = hop_summary(records)
    assert summary["copies"] == 3
    assert summary["depths"] == {
        0: {"share": 0.333, "median_after_first_s": 0.0},
        1: {"share": 0.333, "median_after_first_s": 0.6},
        2: {"share": 0.333, "median_after_first_s": 1.4},
    }
    assert summary["mean_depth"] == 1.0
    assert summary["mean_delay_s"] == 1.0
    assert summary["hop"]["notice"]["median"] == 0.15
    assert summary["hop"]["wait"]["mean"] == 0.15
    assert summary["hop"]["transfer"]["p90"] == 0.5  # nearest rank: the higher of two


def test_pieces_are_chosen_by_when_their_first_copy_came() -> None:
    records = [
        record("g", "origin", 0.0, None, 1.0, piece=0),
        record("a", "g", 1.1, 1.2, 1.5, piece=0),
        record("g", "origin", 0.0, None, 5.0, piece=1),
        record("a", "g", 5.1, 5.2, 5.4, piece=1),
    ]
    late = hop_summary(records, since=2.0)
    assert late["copies"] == 2
    assert late["depths"][1]["median_after_first_s"] == 0.4
    with pytest.raises(InvalidInput, match="no trace records"):
        hop_summary([])


def test_a_sender_without_a_trace_leaves_its_copies_out_of_the_hop_counts() -> None:
    records = [record("g", "origin", 0.0, None, 1.0), record("b", "unknown:1", 1.1, 1.2, 1.5)]
    summary = hop_summary(records)
    assert summary["depths"] == {0: {"share": 1.0, "median_after_first_s": 0.0}}
    assert summary["hop"]["notice"] is None
    assert summary["mean_delay_s"] == 0.5  # still a later copy


def test_torn_lines_are_skipped_and_counted_but_other_json_is_named(tmp_path: Path) -> None:
    good = json.dumps(record("g", "origin", 0.0, None, 1.0))
    crashed = tmp_path / "crashed.trace"  # torn twice: mid-file before a restart, and at the end
    crashed.write_text(good + "\n" + good[:20] + "\n" + good + "\n" + good[:7])
    records, torn = read_traces([crashed])
    assert len(records) == 2 and torn == 2
    foreign = tmp_path / "foreign.trace"
    foreign.write_text(good + '\n{"peer": "g"}\n' + good + "\n")
    with pytest.raises(InvalidInput, match=r"foreign\.trace line 2: not a trace record"):
        read_traces([foreign])


def test_a_trace_reopened_after_a_crash_keeps_the_torn_line_on_its_own(tmp_path: Path) -> None:
    path = tmp_path / "h.trace"
    path.write_text(json.dumps(record("h:1", "origin", 0.0, None, 1.0)) + "\n" + '{"peer": "h')
    reopened = TransferTrace(str(path), "h:1")
    reopened.record("a", 5, "origin", 0, 10.0, None)
    reopened.close()
    records, torn = read_traces([path])
    assert [r["piece"] for r in records] == [0, 5] and torn == 1


def test_an_unwritable_trace_is_refused_at_start_and_a_full_disk_gives_it_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(InvalidInput, match=r"cannot write the trace .*missing"):
        TransferTrace(str(tmp_path / "missing" / "t.trace"), "me:1")
    full = TransferTrace("/dev/full", "me:1")  # every write fails with ENOSPC
    full.record("a", 0, "origin", 0, 0.0, None)
    full.record("a", 1, "origin", 0, 0.0, None)  # given up: no second message, no exception
    assert capsys.readouterr().err.count("trace /dev/full given up") == 1


def test_a_swarm_traces_every_piece_it_stores(
    cluster: Any, origin: tuple[Path, Manifest], tmp_path: Path
) -> None:
    store, manifest = origin
    traces = [tmp_path / f"h{i}.trace" for i in range(3)]
    first = cluster.peer("h0", [], "--origin", str(store), "--trace", str(traces[0])).start()
    hosts = [first] + [
        cluster.peer(
            f"h{i}", [first.address], "--origin", str(store), "--trace", str(traces[i])
        ).start()
        for i in (1, 2)
    ]
    for i, host in enumerate(hosts):
        pull(host.port, manifest.id, tmp_path / f"out{i}", None, None, 60.0)
    records, torn = read_traces(traces)
    assert torn == 0
    pieces = len({ref.hash for entry in manifest.files for ref in entry.pieces})
    for host in hosts:
        mine = [r for r in records if r["peer"] == host.address]
        assert sorted(r["piece"] for r in mine) == list(range(pieces))  # each once
        for r in mine:
            assert r["from"] == "origin" or r["from"] in {h.address for h in hosts} - {host.address}
            assert r["requested"] <= r["stored"]
            if r["first_byte"] is not None:
                assert r["requested"] <= r["first_byte"] <= r["stored"]
    summary = hop_summary(records)
    assert summary["copies"] == 3 * pieces
    assert sum(row["share"] for row in summary["depths"].values()) == pytest.approx(1, abs=0.01)
    shown = subprocess.run(
        [sys.executable, "-m", "shipyard.cli.main", "peer", "hops", *map(str, traces)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert f"{3 * pieces} copies" in shown and "transfer" in shown


def test_a_daemon_asked_for_an_unwritable_trace_exits_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "no-such-dir" / "t.trace"
    done = subprocess.run(
        [sys.executable, "-m", "shipyard.cli.main", "peer", "serve", "--listen",
         f"127.0.0.1:{free_port()}",
         "--store", str(tmp_path / "store"), "--trace", str(bad)],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode != 0
    assert f"cannot write the trace {bad}" in done.stderr


def hops(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shipyard.cli.main", "peer", "hops", *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_hops_on_a_path_it_cannot_read_says_so_in_one_line(tmp_path: Path) -> None:
    good = tmp_path / "good.trace"
    good.write_text(json.dumps(record("g", "origin", 0.0, None, 1.0)) + "\n")
    assert hops(str(good)).returncode == 0
    for path, code in {
        str(tmp_path / "missing.trace"): 4,  # NotFound
        str(tmp_path): 2,  # a directory: InvalidInput
        "/proc/self/mem": 6,  # opens, but reading fails (EIO), even for root: StorageError
    }.items():
        done = hops(str(good), path)
        assert done.returncode == code, done.stderr
        assert done.stderr.count("\n") == 1 and path in done.stderr, done.stderr
        assert done.stdout == ""


RECORD_LIKE = st.fixed_dictionaries(
    {
        "peer": st.sampled_from(["a", "b", "c"]),
        "artifact": st.just("x"),
        "piece": st.integers(-2, 3),
        "from": st.sampled_from(["a", "b", "c", "origin"]),
        "lane": st.integers(0, 1),
        "requested": st.floats(allow_nan=True, allow_infinity=True),
        "first_byte": st.none() | st.floats(),
        "stored": st.floats(-1e308, 1e308),
    }
)
LINE = (
    st.text(max_size=40)
    | RECORD_LIKE.map(json.dumps)
    | st.recursive(st.none() | st.integers() | st.text(max_size=5), st.lists).map(json.dumps)
    | st.integers(1, 5000).map(lambda depth: "[" * depth + "]" * depth)
)


@pytest.mark.fuzz
@settings(max_examples=200, deadline=None)
@given(lines=st.lists(LINE, max_size=8), raw=st.binary(max_size=40), window=st.floats(0, 10))
def test_any_trace_file_gives_a_summary_or_a_project_error(
    tmp_path_factory: pytest.TempPathFactory, lines: list[str], raw: bytes, window: float
) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "t.trace"
    path.write_bytes("\n".join(lines).encode() + b"\n" + raw)
    try:
        records, _ = read_traces([path])
        json.dumps(hop_summary(records, since=window))
    except ShipyardError:
        pass  # refused by name: the only way out besides a summary
