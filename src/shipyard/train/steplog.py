"""Per-rank, per-step times as CSV: the data behind a step-time heatmap (rank × step)."""

from pathlib import Path
from typing import IO

from shipyard.train.heartbeat import Beat

COLUMNS = ("attempt", "rank", "step", "at", "step_time", "work_time", "data_wait", "stall", "loss")


class StepLog:
    """Appends one row per `step` beat to `path` (kept across controller restarts)."""

    def __init__(self, path: Path) -> None:
        fresh = not path.exists()
        self._out: IO[str] = open(path, "a")  # noqa: SIM115 - closed in close()
        if fresh:
            self._out.write(",".join(COLUMNS) + "\n")

    def write(self, attempt: int, beat: Beat) -> None:
        f = beat.fields
        times = [
            f"{float(f[name]):.6f}" for name in ("step_time", "work_time", "data_wait", "stall")
        ]
        row = [str(attempt), str(beat.rank), str(beat.step), f"{beat.at:.6f}", *times, f["loss"]]
        self._out.write(",".join(row) + "\n")

    def flush(self) -> None:
        self._out.flush()

    def close(self) -> None:
        self._out.close()
