"""Wall time per phase of the demo, and the one-screen summary that ends it."""

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class PhaseClock:
    """Phases in the order they ran, each with its wall time and a one-line outcome."""

    phases: list[tuple[str, float, str]] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    @contextmanager
    def phase(self, name: str) -> Iterator[list[str]]:
        """Time the block; what it appends to the yielded list is the phase's outcome line."""
        outcome: list[str] = []
        began = time.monotonic()
        try:
            yield outcome
        finally:
            self.phases.append((name, time.monotonic() - began, "; ".join(outcome)))

    def skipped(self, name: str, why: str) -> None:
        self.phases.append((name, 0.0, f"skipped: {why}"))

    def summary(self) -> list[str]:
        """The summary's lines: one per phase, then the total."""
        width = max((len(name) for name, _, _ in self.phases), default=5)
        lines = [
            f"{name:<{width}}  {seconds:6.1f} s  {what}" for name, seconds, what in self.phases
        ]
        total = time.monotonic() - self.started
        lines.append(f"{'total':<{width}}  {total:6.1f} s")
        return lines
