"""Statistics: standard errors, clustering, paired differences, the regression alert."""

import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shipyard.evals.stats import estimate, paired, regression_alert


def test_standard_error_of_a_mean() -> None:
    est = estimate([1.0, 0.0, 1.0, 0.0])
    assert est.mean == 0.5 and est.se == pytest.approx(math.sqrt((1 / 3) / 4))


def test_clustered_error_is_larger_when_clusters_move_together() -> None:
    values = [1.0] * 10 + [0.0] * 10
    plain = estimate(values)
    clustered = estimate(values, ["a"] * 10 + ["b"] * 10)
    assert clustered.clusters == 2 and clustered.se > plain.se


def test_paired_difference_uses_only_common_items() -> None:
    a = {"x": 1.0, "y": 1.0, "z": 0.0}
    b = {"x": 0.0, "y": 1.0, "w": 1.0}
    diff = paired(a, b)
    assert diff.n == 2 and diff.mean == 0.5


def _simulate(
    seed: int, drop: float, checkpoints: int = 4, n: int = 400
) -> tuple[dict[str, float], list[tuple[str, dict[str, float]]]]:
    """A baseline with per-item difficulty, then checkpoints that agree with it except that each
    item is flipped with a small probability; `drop` lowers the later checkpoints' accuracy."""
    rng = random.Random(seed)
    p = [rng.random() for _ in range(n)]
    base = {f"i{i}": float(rng.random() < p[i]) for i in range(n)}
    runs = []
    for c in range(checkpoints):
        lowered = drop if c >= checkpoints - 2 else 0.0
        scores = {}
        for i, key in enumerate(base):
            # resample 20% of items from the same item difficulty (noise), minus the drop
            if rng.random() < 0.2:
                scores[key] = float(rng.random() < max(0.0, p[i] - lowered))
            else:
                scores[key] = base[key] if rng.random() >= lowered else 0.0
        runs.append((f"ckpt{c}", scores))
    return base, runs


@settings(max_examples=60, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**31))
def test_alert_fires_on_a_planted_regression(seed: int) -> None:
    base, runs = _simulate(seed, drop=0.25)
    alert = regression_alert(base, runs, k=3.0)
    assert alert is not None and alert.checkpoints == ("ckpt2", "ckpt3")


@settings(max_examples=60, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**31))
def test_alert_stays_quiet_on_noise(seed: int) -> None:
    base, runs = _simulate(seed, drop=0.0)
    assert regression_alert(base, runs, k=3.0) is None


def test_one_dip_is_not_an_alert() -> None:
    base = {f"i{i}": 1.0 for i in range(50)}
    dip = {f"i{i}": 0.0 if i < 25 else 1.0 for i in range(50)}
    assert regression_alert(base, [("a", dip), ("b", base), ("c", dip)], k=2.0) is None
    alert = regression_alert(base, [("a", dip), ("b", dip)], k=2.0)
    assert alert is not None and "two consecutive" in alert.message()


def test_items_without_a_cluster_are_each_their_own() -> None:
    """`[1, 0] * 5`, the first two in cluster "c", eight unclustered: pooling the eight into
    one cluster lets their residuals cancel (SE 0.0); each its own cluster gives 0.150."""
    values = [1.0, 0.0] * 5
    est = estimate(values, ["c", "c"] + [None] * 8)
    assert est.clusters == 9
    assert est.se == pytest.approx(math.sqrt(9 / 8 * 8 * 0.25) / 10)  # 0.150
    assert round(est.se, 3) == 0.150
    alone = estimate(values, [f"i{n}" for n in range(10)])
    assert estimate(values, [None, "x"] + [None] * 8).se == pytest.approx(alone.se)


def test_the_alert_clusters_its_paired_difference() -> None:
    """Checkpoints that miss one whole cluster of three: the clustered SE (0.333) keeps a
    2-SE alert quiet, where ignoring clusters (SE 0.142) would fire it."""
    base = {f"q{n}": 1.0 for n in range(12)}
    dip = {f"q{n}": 0.0 if n % 3 == 0 else 1.0 for n in range(12)}
    clusters: dict[str, str | None] = {f"q{n}": f"c{n % 3}" for n in range(12)}
    assert regression_alert(base, [("a", dip), ("b", dip)], k=2.0) is not None
    assert regression_alert(base, [("a", dip), ("b", dip)], k=2.0, clusters=clusters) is None
    assert paired(dip, base, clusters).se == pytest.approx(1 / 3)
