"""Job traces for the simulator: the Philly CSV format (and its virtual-cluster sizes).

Rows are `timestamp,duration,num_gpus,gpu_time,cluster`. Jobs submitted in the window are kept,
times are re-based on the first kept job, and `load_factor` K divides every inter-arrival gap by K.
"""

import csv
import datetime
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from shipyard.errors import InvalidInput
from shipyard.scheduler.model import Job

HOUR = 3600.0
WEEK = 7 * 24 * HOUR


@dataclass(frozen=True)
class TraceJob:
    row: int
    submit: float
    duration: float
    gpus: int
    vc: str


def declared_limit(duration: float) -> float:
    """The true duration rounded up to a power-of-two number of hours, capped at 7 days."""
    hours = max(duration, 1.0) / HOUR
    return min(WEEK, HOUR * 2 ** max(0, math.ceil(math.log2(hours)))) if hours > 1 else HOUR


def oracle_limit(duration: float) -> float:
    return max(duration, 1.0)


def load_philly(
    path: Path,
    start: str = "2017-10-01 00:00:00",
    days: float = 61,
    load_factor: float = 1.0,
) -> list[TraceJob]:
    if load_factor <= 0:
        raise InvalidInput(f"load factor must be > 0, got {load_factor}")
    begin = _parse(start, path, 0)
    end = begin + days * 86400
    rows: list[tuple[float, int, float, int, str]] = []
    try:
        with path.open(newline="") as handle:
            for n, rec in enumerate(csv.DictReader(handle), start=2):
                try:
                    submit = _parse(rec["timestamp"], path, n)
                    item = (submit, n, float(rec["duration"]), int(rec["num_gpus"]), rec["cluster"])
                except (KeyError, ValueError) as exc:
                    raise InvalidInput(f"{path}:{n}: bad trace row ({exc})") from None
                if begin <= submit < end:
                    rows.append(item)
    except OSError as exc:
        raise InvalidInput(f"trace {path}: cannot read ({exc.strerror})") from None
    if not rows:
        raise InvalidInput(f"trace {path}: no jobs submitted in the window from {start}")
    rows.sort()
    first = rows[0][0]
    return [
        TraceJob(row=n, submit=(t - first) / load_factor, duration=d, gpus=g, vc=vc)
        for t, n, d, g, vc in rows
    ]


def load_vc_sizes(path: Path) -> dict[str, int]:
    """Node counts per virtual cluster (`vc,node num`)."""
    try:
        with path.open(newline="") as handle:
            reader = csv.reader(handle)
            next(reader, None)
            return {vc: int(nodes) for vc, nodes in reader}
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"VC table {path}: unreadable ({exc})") from None


def to_jobs(
    trace: list[TraceJob],
    limit: Callable[[float], float],
    preemptible: bool = True,
    checkpoint_interval: float = 0.0,
) -> list[Job]:
    return [
        Job(
            id=f"{t.vc}-{t.row}",
            team=t.vc,
            gpus=t.gpus,
            time_limit=limit(t.duration),
            submit_time=t.submit,
            duration=t.duration,
            preemptible=preemptible,
            checkpoint_interval=checkpoint_interval,
        )
        for t in trace
    ]


def _parse(text: str, path: Path, line: int) -> float:
    try:
        stamp = datetime.datetime.fromisoformat(text).replace(tzinfo=datetime.UTC)
    except ValueError:
        raise InvalidInput(f"{path}:{line}: bad timestamp {text!r}") from None
    return stamp.timestamp()
