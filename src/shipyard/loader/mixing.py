"""Deterministic mixing: which source each sample position draws from, as a pure function.

Weights are made small integers `w_i` with sum `D` (at most `RESOLUTION`; see
`integer_weights`). Within a period of `D` positions, position `m` goes to the source furthest
behind its target (`(m + 1) * w_i / D - count_i`, ties to the lower index). After `D` positions
every source has exactly `w_i` samples, so the pattern repeats: the source of, and the count before,
any position come from one precomputed period in O(1), with no iterator state. The greedy rule
keeps every cumulative count within one sample of its target; `max_discrepancy` checks that over a
whole period, which bounds it for every position.
"""

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from shipyard.errors import InvalidInput

MAX_DENOMINATOR = 1000
RESOLUTION = 10_000  # the finest share used when weights are not simple fractions


def integer_weights(weights: Sequence[float]) -> list[int]:
    """`weights` as small integers in (nearly) the same proportions.

    Exact when each weight is a fraction with a small denominator (0.5/0.3/0.2 → 5/3/2, thirds →
    1/1/1); otherwise the shares are rounded to multiples of `1 / RESOLUTION` by largest remainder.
    """
    if not weights or any(not math.isfinite(w) or w < 0 for w in weights) or sum(weights) <= 0:
        raise InvalidInput(f"mixture weights must be finite, >= 0 and not all 0, got {weights}")
    fractions = [Fraction(w).limit_denominator(MAX_DENOMINATOR) for w in weights]
    scale = math.lcm(*(f.denominator for f in fractions))
    ints = [int(f * scale) for f in fractions]
    if sum(ints) > RESOLUTION:
        total = sum(weights)
        exact = [w * RESOLUTION / total for w in weights]
        ints = [math.floor(x) for x in exact]
        by_remainder = sorted(range(len(ints)), key=lambda i: ints[i] - exact[i])
        for i in by_remainder[: RESOLUTION - sum(ints)]:
            ints[i] += 1
    divisor = math.gcd(*ints)
    return [i // divisor for i in ints]


class Mixture:
    """The source of every position of one mixture phase, counted from the phase start."""

    def __init__(self, weights: Sequence[float]) -> None:
        self.weights = integer_weights(weights)
        self.period = sum(self.weights)
        w = np.array(self.weights, dtype=np.int64)
        pattern = np.empty(self.period, dtype=np.int64)
        counts = np.zeros(len(w), dtype=np.int64)
        # prefix[m, i]: samples of source i among the first m positions of a period.
        prefix = np.zeros((self.period + 1, len(w)), dtype=np.int64)
        for m in range(self.period):
            # Deficit scaled by D keeps it in exact integers.
            src = int(np.argmax((m + 1) * w - counts * self.period))
            pattern[m] = src
            counts[src] += 1
            prefix[m + 1] = counts
        self.pattern = pattern
        self.prefix = prefix
        if self.max_discrepancy() >= 1:  # the greedy bound; checked rather than assumed
            raise InvalidInput(f"mixture weights {list(weights)} cannot be kept within one sample")

    def counts(self, n: int) -> npt.NDArray[np.int64]:
        """Samples of each source among the first `n` positions of the phase."""
        cycles, rest = divmod(n, self.period)
        counts: npt.NDArray[np.int64] = (
            cycles * np.array(self.weights, np.int64) + self.prefix[rest]
        )
        return counts

    def assign(self, start: int, stop: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """For positions `start..stop-1`: (source, that source's count before the position)."""
        m = np.arange(start, stop, dtype=np.int64)
        cycles, rest = np.divmod(m, self.period)
        sources = self.pattern[rest]
        w = np.array(self.weights, dtype=np.int64)
        before = cycles * w[sources] + self.prefix[rest, sources]
        return sources, before

    def max_discrepancy(self) -> float:
        """Largest |count_i(n) - n * share_i| over a period (so over all n)."""
        n = np.arange(self.period + 1, dtype=np.float64)[:, None]
        shares = np.array(self.weights, dtype=np.float64) / self.period
        return float(np.abs(self.prefix - n * shares).max())
