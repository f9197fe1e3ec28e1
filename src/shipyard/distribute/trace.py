"""Where each piece a daemon stored came from, and when: `shipyard peer serve --trace FILE`.

One JSON line per stored piece, appended as it is stored:

    {"peer": "10.0.0.5:7000", "artifact": "<id>", "piece": 17, "from": "10.0.0.9:7000",
     "lane": 0, "requested": 1796104219.512, "first_byte": 1796104219.640,
     "stored": 1796104219.958}

`from` is a peer's HOST:PORT or "origin"; times are wall-clock seconds (the origin's first byte is
not seen, so null), so the traces of a whole swarm line up when the hosts' clocks agree.
`hop_summary` reads a swarm's traces back (`shipyard peer hops TRACE...`): how many hops each piece
took from its first copy, how long after that copy each hop landed, and what one hop cost, split
into noticing the piece upstream, waiting behind the lane's earlier pieces, and the transfer
itself.
"""

import contextlib
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TextIO

from shipyard.distribute.transfer import ORIGIN
from shipyard.errors import InvalidInput, NotFound, StorageError

MAX_DEPTH = 64  # a chain of sources longer than this is a trace that does not add up

Record = dict[str, Any]


class TransferTrace:
    """The trace file of one daemon. A line goes out in one write as each piece is stored, so a
    daemon killed mid-run leaves every earlier line intact."""

    def __init__(self, path: str, me: str) -> None:
        try:
            self._out: TextIO | None = open(path, "a", buffering=1)  # noqa: SIM115 - closed in close()
        except OSError as exc:
            raise InvalidInput(f"cannot write the trace {path}: {exc.strerror or exc}") from None
        self.path = path
        self.me = me
        if self._out.tell() > 0 and _last_byte(path) != b"\n":
            self._out.write("\n")  # a line a crash tore stays one of its own, to be skipped
        self._wall_offset = time.time() - time.monotonic()

    def record(
        self,
        artifact: str,
        piece: int,
        source: str,
        lane: int,
        requested: float,
        first_byte: float | None,
    ) -> None:
        """A piece stored just now, asked for at `requested` and its first byte received at
        `first_byte` (`time.monotonic()` readings). A trace that cannot be written (a full disk)
        is given up, once said on stderr: the fetch goes on."""
        if self._out is None:
            return
        stored = time.monotonic()
        line = {
            "peer": self.me,
            "artifact": artifact,
            "piece": piece,
            "from": source,
            "lane": lane,
            "requested": self._wall(requested),
            "first_byte": None if first_byte is None else self._wall(first_byte),
            "stored": self._wall(stored),
        }
        try:
            self._out.write(json.dumps(line, separators=(",", ":")) + "\n")
        except OSError as exc:
            print(f"peer {self.me}: trace {self.path} given up: {exc}", file=sys.stderr, flush=True)
            self.close()

    def close(self) -> None:
        if self._out is not None:
            with contextlib.suppress(OSError):  # the lines a full disk refused: the file closes
                self._out.close()
            self._out = None

    def _wall(self, monotonic: float) -> float:
        return round(monotonic + self._wall_offset, 6)


def _last_byte(path: str) -> bytes:
    with open(path, "rb") as trace:
        trace.seek(-1, os.SEEK_END)
        return trace.read(1)


def read_traces(paths: Iterable[str | Path]) -> tuple[list[Record], int]:
    """Every record of the given trace files, and how many torn lines were skipped: lines a
    host's crash cut short, which are never whole JSON. A line that is JSON but not a trace
    record (another file, or one edited by hand) names its file and line."""
    records, torn = [], 0
    for path in paths:
        for number, line in enumerate(_read(Path(path)).splitlines(), 1):
            try:
                record = json.loads(line)
            except ValueError:
                torn += 1
                continue
            except RecursionError:  # JSON nested too deep to be a record
                record = None
            if not isinstance(record, dict) or not _complete(record):
                raise InvalidInput(f"{path} line {number}: not a trace record")
            records.append(record)
    return records, torn


def _read(path: Path) -> str:
    """A trace file's text. Trace lines are ASCII JSON, so bytes that are not UTF-8 can only be
    part of a torn line (or another file): they fail to parse there, not here."""
    try:
        return path.read_bytes().decode(errors="replace")
    except FileNotFoundError:
        raise NotFound(f"trace {path}: no such file") from None
    except IsADirectoryError:
        raise InvalidInput(f"trace {path}: a directory, not a trace file") from None
    except OSError as exc:
        raise StorageError(f"trace {path}: cannot be read: {exc.strerror or exc}") from None


def _complete(record: Record) -> bool:
    first_byte = record.get("first_byte")
    return (
        all(isinstance(record.get(k), str) for k in ("peer", "artifact", "from"))
        and isinstance(record.get("piece"), int)
        and all(_seconds(record.get(k)) for k in ("requested", "stored"))
        and (first_byte is None or _seconds(first_byte))
    )


def _seconds(value: object) -> bool:
    """A wall-clock time: a finite number (JSON's NaN and Infinity parse, but are no time)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def hop_summary(
    records: list[Record], since: float = 0.0, until: float = float("inf")
) -> dict[str, Any]:
    """How pieces spread, over the pieces whose first copy was stored between `since` and
    `until` seconds after the first request in `records`.

    `depths`: per hop count from the first copy (0: fetched from the origin), the share of
    copies and the median seconds after the first copy they were stored. `hop`: for copies
    fetched from a peer whose own record is present, the medians, means and 90th percentiles of
    `notice` (the upstream stored it; this peer asked), `wait` (asked; first byte) and
    `transfer` (first byte; stored). `mean_delay_s`: how long after a piece's first copy its
    other copies were stored, on average: how far a host runs behind the swarm's first copies."""
    if not records:
        raise InvalidInput("no trace records to summarise")
    start = min(r["requested"] for r in records)
    stored = {(r["peer"], r["artifact"], r["piece"]): r for r in records}
    first: dict[tuple[str, int], float] = {}
    for r in records:
        key = (r["artifact"], r["piece"])
        first[key] = min(first.get(key, r["stored"]), r["stored"])
    chosen = [r for r in records if since <= first[r["artifact"], r["piece"]] - start < until]
    by_depth: dict[int, list[float]] = {}
    parts: dict[str, list[float]] = {"notice": [], "wait": [], "transfer": []}
    delays = []
    for r in chosen:
        delay = r["stored"] - first[r["artifact"], r["piece"]]
        if delay > 0:
            delays.append(delay)
        depth = _depth(r, stored)
        if depth is not None:
            by_depth.setdefault(depth, []).append(delay)
        upstream = stored.get((r["from"], r["artifact"], r["piece"]))
        if upstream is not None and r["first_byte"] is not None:
            parts["notice"].append(r["requested"] - upstream["stored"])
            parts["wait"].append(r["first_byte"] - r["requested"])
            parts["transfer"].append(r["stored"] - r["first_byte"])
    counted = sum(len(v) for v in by_depth.values())
    return {
        "copies": len(chosen),
        "depths": {
            depth: {
                "share": round(len(v) / counted, 3),
                "median_after_first_s": round(statistics.median(v), 3),
            }
            for depth, v in sorted(by_depth.items())
        },
        "mean_depth": round(sum(d * len(v) for d, v in by_depth.items()) / counted, 2)
        if counted
        else None,
        "hop": {name: _spread(values) for name, values in parts.items()},
        "mean_delay_s": round(statistics.mean(delays), 3) if delays else None,
    }


def _depth(record: Record, stored: dict[tuple[str, str, int], Record]) -> int | None:
    """Hops from the origin along the chain of senders; None where a sender left no trace."""
    depth = 0
    current: Record | None = record
    while current is not None and current["from"] != ORIGIN:
        current = stored.get((current["from"], current["artifact"], current["piece"]))
        depth += 1
        if depth > MAX_DEPTH:
            return None
    return None if current is None else depth


def _spread(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)
    return {
        "median": round(statistics.median(ordered), 3),
        "mean": round(statistics.mean(ordered), 3),
        "p90": round(ordered[math.ceil(0.9 * len(ordered)) - 1], 3),  # nearest rank
    }
