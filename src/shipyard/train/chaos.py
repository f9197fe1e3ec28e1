"""Random fault injection with a target mean time between failures (exponential gaps)."""

import random

from shipyard.train.config import ChaosConfig


class Chaos:
    def __init__(self, cfg: ChaosConfig, world_size: int) -> None:
        self.cfg = cfg
        self.world_size = world_size
        self._rng = random.Random(cfg.seed)
        self._next: float | None = None

    @property
    def enabled(self) -> bool:
        return self.cfg.mtbf_s > 0 and bool(self.cfg.kinds)

    def arm(self, now: float) -> None:
        """Schedule the next fault (counted from `now`, when the attempt is running)."""
        if self.enabled and self._next is None:
            self._next = now + self._rng.expovariate(1.0 / self.cfg.mtbf_s)

    def disarm(self) -> None:
        self._next = None

    def due(self, now: float) -> tuple[str, int] | None:
        """The (kind, rank) to inject now, if one is due."""
        if self._next is None or now < self._next:
            return None
        self._next = None
        return self._rng.choice(self.cfg.kinds), self._rng.randrange(self.world_size)
