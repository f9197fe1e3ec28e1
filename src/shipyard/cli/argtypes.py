"""Argument types the commands share, so a bad number is a usage error, never "a bug".

Each is an argparse `type=`: an out-of-range, non-finite or malformed value is refused by
argparse itself (`error: argument --port: expected ...`, exit 2) before any command runs.
"""

import argparse
import math
from collections.abc import Callable

MAX_ID = (1 << 63) - 1  # the largest row id SQLite and PostgreSQL (bigint) hold
MAX_COUNT = 1 << 31  # counts and sizes: far past any real one, far short of overflow


def integer(low: int, high: int = MAX_COUNT) -> Callable[[str], int]:
    """An integer from `low` to `high`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"expected an integer from {low} to {high}, got {text[:40]!r}"
            )
        return value

    parse.__name__ = "integer"
    return parse


def number(low: float, high: float = math.inf, *, above: bool = False) -> Callable[[str], float]:
    """A finite number from `low` (excluded when `above`) to `high`; never NaN or infinite."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        inside = low < value if above else low <= value
        if not math.isfinite(value) or not inside or value > high:
            lower = f"above {low:g}" if above else f"from {low:g}"
            upper = "" if math.isinf(high) else f" to {high:g}"
            raise argparse.ArgumentTypeError(
                f"expected a finite number {lower}{upper}, got {text[:40]!r}"
            )
        return value

    parse.__name__ = "number"
    return parse


port = integer(0, 65535)  # a TCP port; 0: any free one
row_id = integer(1, MAX_ID)  # a database id (a queue item, a batch job)
count = integer(1)  # a positive count: items, workers, processes
seconds = number(0.0)  # a duration
nonnegative = number(0.0)  # a budget or margin, 0 allowed
fraction = number(0.0, 1.0)  # a threshold or share from 0 to 1
positive = number(0.0, above=True)  # a rate, a factor or an interval that must pass
seed = integer(0, (1 << 32) - 1)  # a random seed (NumPy's range)
