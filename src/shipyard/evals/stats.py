"""Means with standard errors, paired differences, and the regression alert.

Following Miller (2024), "Adding Error Bars to Evals": the standard error of a mean over items is
sd/sqrt(n); where items come in clusters (several questions on one passage, one operation), the
clustered standard error sums the residuals within each cluster first, because items of a cluster
are not independent. Two models compared on the same items are compared by the per-item
difference, whose standard error is far smaller than either mean's when the models agree on most
items.
"""

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from shipyard.errors import InvalidInput


@dataclass(frozen=True)
class Estimate:
    mean: float
    se: float
    n: int
    clusters: int  # 0 when not clustered

    def as_json(self) -> dict[str, float | int | None]:
        """JSON-safe: an undefined mean or error (no items, one item, one cluster) is null."""
        return {
            "mean": self.mean if math.isfinite(self.mean) else None,
            "se": self.se if math.isfinite(self.se) else None,
            "n": self.n,
            "clusters": self.clusters,
        }


def estimate(values: Sequence[float], clusters: Sequence[str | None] | None = None) -> Estimate:
    """Mean and standard error; clustered when `clusters` names a cluster for each value."""
    n = len(values)
    if n == 0:
        return Estimate(math.nan, math.nan, 0, 0)
    mean = math.fsum(values) / n
    if clusters is None or all(c is None for c in clusters):
        if n < 2:
            return Estimate(mean, math.nan, n, 0)
        variance = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
        return Estimate(mean, math.sqrt(variance / n), n, 0)
    if len(clusters) != n:
        raise InvalidInput(f"{len(clusters)} cluster labels for {n} values")
    # An item without a cluster is a cluster of its own: pooling them all into one would let
    # their residuals cancel (the error can even read 0).
    sums: dict[tuple[bool, str | int], float] = defaultdict(float)
    for index, (value, cluster) in enumerate(zip(values, clusters, strict=True)):
        sums[(True, cluster) if cluster is not None else (False, index)] += value - mean
    groups = len(sums)
    # the small-sample correction G/(G-1) keeps few clusters from understating the error
    correction = groups / (groups - 1) if groups > 1 else math.nan
    se = math.sqrt(correction * math.fsum(s * s for s in sums.values())) / n
    return Estimate(mean, se, n, groups)


def paired(
    a: Mapping[str, float],
    b: Mapping[str, float],
    clusters: Mapping[str, str | None] | None = None,
) -> Estimate:
    """The mean of a - b over the items both scored, with its (clustered) standard error."""
    common = sorted(set(a) & set(b))
    diffs = [a[i] - b[i] for i in common]
    labels = [clusters.get(i) for i in common] if clusters else None
    return estimate(diffs, labels)


@dataclass(frozen=True)
class Alert:
    checkpoints: tuple[str, str]  # the two consecutive checkpoints that dropped
    drops: tuple[float, float]  # each one's paired mean difference against the baseline
    ses: tuple[float, float]
    k: float

    def message(self) -> str:
        parts = [
            f"{c[:16]} {d:+.4f} (SE {s:.4f})"
            for c, d, s in zip(self.checkpoints, self.drops, self.ses, strict=True)
        ]
        return f"regression: two consecutive checkpoints below baseline by > {self.k} SE: " + (
            "; ".join(parts)
        )


def regression_alert(
    baseline: Mapping[str, float],
    checkpoints: Sequence[tuple[str, Mapping[str, float]]],
    k: float = 2.0,
    clusters: Mapping[str, str | None] | None = None,
) -> Alert | None:
    """An alert when two consecutive checkpoints (in order) each score below `baseline` by more
    than `k` paired standard errors on the same items; None otherwise. One noisy dip is not
    enough: requiring two in a row keeps the false-alarm rate near the square of one test's."""
    previous: tuple[str, Estimate] | None = None
    for name, scores in checkpoints:
        diff = paired(scores, baseline, clusters)
        dropped = diff.n > 1 and diff.mean < -k * diff.se
        if dropped and previous is not None:
            before = previous[1]
            return Alert((previous[0], name), (before.mean, diff.mean), (before.se, diff.se), k)
        previous = (name, diff) if dropped else None
    return None
