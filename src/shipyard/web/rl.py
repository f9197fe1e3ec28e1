"""RL runs for the console: the reports `shipyard rl run` writes to
`$SHIPYARD_HOME/rl/reports/<name>.json` (see docs/rl.md for the report's fields)."""

import json
from pathlib import Path
from typing import Any

from shipyard.errors import InvalidInput, NotFound, StorageError
from shipyard.rl.config import RUN_NAME
from shipyard.rl.report import reports_dir

MAX_REPORT = 8 << 20


def _read(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_REPORT + 1)
        found = json.loads(raw)
    except OSError as exc:
        raise StorageError(f"RL report {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise StorageError(f"RL report {path} is not JSON ({exc})") from None
    if len(raw) > MAX_REPORT or not isinstance(found, dict):
        raise StorageError(f"RL report {path} is not one JSON object of at most 8 MiB")
    return found


def _get(report: dict[str, Any], *keys: str) -> Any:
    value: Any = report
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _summary(name: str, report: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "run": report.get("name"),
        "versions": report.get("versions"),
        "seconds": report.get("seconds"),
        "eta": report.get("eta"),
        "reward_first": _get(report, "reward", "first"),
        "reward_last": _get(report, "reward", "last"),
        "accuracy_warmup": _get(report, "heldout_accuracy", "warmup"),
        "accuracy_final": _get(report, "heldout_accuracy", "final"),
        "dropped_stale_groups": report.get("dropped_stale_groups"),
    }


def runs(home: Path) -> list[dict[str, Any]]:
    """Every stored report's headline figures, by name; an unreadable one says why."""
    folder = reports_dir(home)
    paths = sorted(folder.glob("*.json")) if folder.is_dir() else []
    found = []
    for path in paths:
        if not RUN_NAME.fullmatch(path.stem):
            continue
        try:
            found.append(_summary(path.stem, _read(path)))
        except StorageError as exc:
            found.append({"name": path.stem, "error": str(exc)})
    return found


def run(home: Path, name: str) -> dict[str, Any]:
    """One run's whole report."""
    if not RUN_NAME.fullmatch(name):
        raise InvalidInput(f"RL run name {name[:60]!r}: allowed A-Z a-z 0-9 . _ -")
    path = reports_dir(home) / f"{name}.json"
    if not path.is_file():
        raise NotFound(f"no RL report named {name!r} (under {reports_dir(home)})")
    return {**_read(path), "report": name}


def staleness_rows(report: dict[str, Any]) -> list[tuple[str, float, str]]:
    """The staleness histogram as bar rows: (staleness, share of trained trajectories, label)."""
    histogram = report.get("staleness_histogram")
    if not isinstance(histogram, dict):
        return []
    counts = {str(k): v for k, v in histogram.items() if isinstance(v, int) and v >= 0}
    total = sum(counts.values())
    return [
        (
            f"staleness {k}",
            v / total if total else 0.0,
            f"{v:,} ({v / total:.1%})" if total else "0",
        )
        for k, v in counts.items()
    ]


def curve(values: Any, x_key: str | None = None, y_key: str = "") -> list[list[float]]:
    """[[x, y], ...] from a list of numbers (x = position) or of objects with x and y keys."""
    if not isinstance(values, list):
        return []
    points = []
    for index, value in enumerate(values):
        if x_key is None and isinstance(value, int | float):
            points.append([float(index), float(value)])
        elif x_key is not None and isinstance(value, dict):
            x, y = value.get(x_key), value.get(y_key)
            if isinstance(x, int | float) and isinstance(y, int | float):
                points.append([float(x), float(y)])
    return points
