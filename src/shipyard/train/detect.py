"""Pure detectors the controller feeds with heartbeats: hangs and stragglers.

They take times as arguments and keep no clocks of their own, so tests drive them exactly.
"""

import statistics
from collections import deque
from dataclasses import dataclass


class HangWatch:
    """A hang is no global progress (the slowest rank's step) for `factor` × the median step time.

    Never less than `floor` seconds; before any step time is known, `startup` seconds.
    """

    def __init__(self, factor: float, floor: float, startup: float) -> None:
        self.factor, self.floor, self.startup = factor, floor, startup
        self.progress = -1
        self.since = 0.0
        self.step_times: deque[float] = deque(maxlen=64)

    def reset(self, now: float) -> None:
        self.progress, self.since = -1, now
        self.step_times.clear()

    def observe(self, global_step: int, now: float, step_time: float | None = None) -> None:
        if step_time is not None and step_time > 0:
            self.step_times.append(step_time)
        if global_step > self.progress:
            self.progress, self.since = global_step, now

    def threshold(self) -> float:
        if not self.step_times:
            return self.startup
        return max(self.factor * statistics.median(self.step_times), self.floor)

    def stalled_for(self, now: float) -> float | None:
        """Seconds without progress, if that is a hang; else None."""
        stalled = now - self.since
        return stalled if stalled > self.threshold() else None


def missing_ranks(entered: dict[int, tuple[int, int]]) -> tuple[tuple[int, int], list[int]]:
    """The pending collective (the furthest any rank entered) and the ranks that never did."""
    pending = max(entered.values())
    return pending, sorted(rank for rank, where in entered.items() if where < pending)


@dataclass(frozen=True)
class Straggler:
    rank: int
    window: int
    ratio: float  # its median work time over its peers' median


class StragglerWatch:
    """Per-rank work time per window of `window_steps`; a rank above `factor` × its peers'
    median for `windows` consecutive windows is flagged once (again only after recovering).

    Needs two ranks or more; a rank's figure for a window is the median of its steps' times."""

    def __init__(self, world_size: int, window_steps: int, factor: float, windows: int) -> None:
        self.world_size = world_size
        self.window_steps, self.factor, self.windows = window_steps, factor, windows
        self._times: dict[int, dict[int, list[float]]] = {}
        self._streak = [0] * world_size
        self.flagged: set[int] = set()

    def reset(self) -> None:
        """A new attempt: partial windows and streaks start over."""
        self._times.clear()
        self._streak = [0] * self.world_size
        self.flagged.clear()

    def observe(self, rank: int, step: int, work_time: float) -> list[Straggler]:
        """Record rank's work time for (0-based) `step`; returns stragglers newly flagged."""
        window = step // self.window_steps
        per_rank = self._times.setdefault(window, {})
        per_rank.setdefault(rank, []).append(work_time)
        full = len(per_rank) == self.world_size and all(
            len(times) >= self.window_steps for times in per_rank.values()
        )
        if not full:
            return []
        del self._times[window]
        medians = {r: statistics.median(times) for r, times in per_rank.items()}
        found = []
        for r, value in sorted(medians.items()):
            # Against its peers' median: with two ranks, a rank 1.5× slower reads as 1.5×.
            peers = statistics.median(v for q, v in medians.items() if q != r)
            ratio = value / peers if peers > 0 else 1.0
            if ratio > self.factor:
                self._streak[r] += 1
                if self._streak[r] == self.windows and r not in self.flagged:
                    self.flagged.add(r)
                    found.append(Straggler(r, window, ratio))
            else:
                self._streak[r] = 0
                self.flagged.discard(r)
        return found
