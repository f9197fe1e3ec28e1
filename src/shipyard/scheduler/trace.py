"""Job traces for the simulator: the Philly CSV format (and its virtual-cluster sizes).

Rows are `timestamp,duration,num_gpus,gpu_time,cluster`. Jobs submitted in the window are kept,
times are re-based on the first kept job, and `load_factor` K divides every inter-arrival gap by K.
The trace holds true durations only; the time limits a user would have declared are drawn by a
`LimitModel`, so no policy sees the truth.
"""

import csv
import datetime
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shipyard.errors import InvalidInput
from shipyard.scheduler.model import Job


@dataclass(frozen=True)
class TraceJob:
    row: int
    submit: float
    duration: float
    gpus: int
    vc: str


@dataclass(frozen=True)
class LimitModel:
    """User time limits as noisy over-estimates: limit = max(floor, duration × U).

    U is log-uniform on [1, overestimate] (U = overestimate ** V, V uniform on [0, 1)), drawn
    from a generator seeded by (seed, trace row), so a job gets the same limit in every arm and
    in every window of the trace that holds it.
    """

    overestimate: float = 4.0
    seed: int = 0
    floor: float = 60.0

    def __post_init__(self) -> None:
        if not self.overestimate >= 1 or not self.floor > 0:
            raise InvalidInput(
                f"limit model: overestimate must be ≥ 1 and floor > 0, got "
                f"{self.overestimate} and {self.floor}"
            )

    def __call__(self, job: TraceJob) -> float:
        draw = random.Random(self.seed * 1_000_003 + job.row).random()
        return max(self.floor, job.duration * float(self.overestimate**draw))

    def describe(self) -> dict[str, Any]:
        return {
            "model": "limit = max(floor, duration * U), U = overestimate ** V, V ~ Uniform[0, 1)"
            ", seeded per trace row",
            "overestimate": self.overestimate,
            "seed": self.seed,
            "floor": self.floor,
        }


def oracle_limit(job: TraceJob) -> float:
    """The true duration: only for the Helios simulator check, which is defined with it."""
    return max(job.duration, 1.0)


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
    limit: Callable[[TraceJob], float],
    preemptible: bool = True,
    checkpoint_interval: float = 0.0,
) -> list[Job]:
    return [
        Job(
            id=f"{t.vc}-{t.row}",
            team=t.vc,
            gpus=t.gpus,
            time_limit=limit(t),
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
