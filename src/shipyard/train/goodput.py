"""Goodput accounting and the Young/Daly checkpoint interval.

Goodput = productive step time ÷ wall time. Every second of wall time lands in one bucket:
productive (kept steps' compute), data wait and checkpoint stall (of kept steps), work lost (steps
after the last committed checkpoint, redone after a failure), detection delay (failure to its
detection), restart (detection to the next attempt's first step starting) and other (start-up,
final save, controller overhead: whatever is left).
"""

import math
from dataclasses import asdict, dataclass, field
from typing import Any

BUCKETS = ("productive", "data_wait", "checkpoint_stall", "lost_work", "detection", "restart")


@dataclass
class _Step:
    duration: float
    data_wait: float
    stall: float


@dataclass
class Ledger:
    productive: float = 0.0
    data_wait: float = 0.0
    checkpoint_stall: float = 0.0
    lost_work: float = 0.0
    detection: float = 0.0
    restart: float = 0.0
    failures: int = 0
    stalls: list[float] = field(default_factory=list)  # recent checkpoint stalls, for C
    _pending: dict[int, _Step] = field(default_factory=dict)
    _restart_from: float | None = None

    def step(self, step: int, duration: float, data_wait: float, stall: float, end: float) -> None:
        """Step `step` (1-based: steps completed) took `duration`, ending at time `end`."""
        if self._restart_from is not None:  # the first step after a restart ends the restart
            self.restart += max(0.0, end - duration - self._restart_from)
            self._restart_from = None
        self._pending[step] = _Step(duration, data_wait, stall)
        if stall > 0:
            self.stalls = [*self.stalls[-15:], stall]

    def commit(self, step: int) -> None:
        """Everything up to `step` is in a committed checkpoint: those steps are kept."""
        for done in sorted(s for s in self._pending if s <= step):
            record = self._pending.pop(done)
            self.productive += max(0.0, record.duration - record.data_wait - record.stall)
            self.data_wait += record.data_wait
            self.checkpoint_stall += record.stall

    def interrupt(
        self, failed_at: float, detected_at: float, committed: int, failure: bool = True
    ) -> None:
        """The attempt stopped at `failed_at` (seen at `detected_at`; a planned drain is no
        failure); steps after `committed` are lost, and a restart begins."""
        self.commit(committed)
        self.lost_work += sum(record.duration for record in self._pending.values())
        self._pending.clear()
        self.detection += max(0.0, detected_at - failed_at)
        self.failures += int(failure)
        self._restart_from = detected_at

    def breakdown(self, wall: float) -> dict[str, float]:
        known = {name: getattr(self, name) for name in BUCKETS}
        known["other"] = max(0.0, wall - sum(known.values()))
        known["wall"] = wall
        known["goodput"] = self.productive / wall if wall > 0 else 0.0
        return known

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["_pending"] = {str(k): asdict(v) for k, v in self._pending.items()}
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Ledger":
        data = dict(data)
        pending = {int(k): _Step(**v) for k, v in data.pop("_pending", {}).items()}
        ledger = cls(**data)
        ledger._pending = pending
        return ledger


def young_daly(stall: float, mtbf: float) -> float:
    """τ* = √(2CM): the checkpoint interval (s) that minimizes expected lost time."""
    return math.sqrt(2 * stall * mtbf) if stall > 0 and mtbf > 0 else 0.0


def model_goodput(stall: float, mtbf: float, restart: float, tau: float) -> float:
    """First-order model of goodput at interval τ: checkpoint overhead C/τ (per τ of work),
    then per failure (every M) half an interval of lost work plus the restart time R."""
    if tau <= 0 or mtbf <= 0:
        return 0.0
    return max(0.0, 1.0 - stall / tau - (tau / 2 + restart) / mtbf)
