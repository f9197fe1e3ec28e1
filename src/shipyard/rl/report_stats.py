"""Summaries of distributions for the report and the per-step log."""


def quantiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    pick = {"p01": 0.01, "p10": 0.1, "p50": 0.5, "p90": 0.9, "p99": 0.99}
    out = {k: ordered[min(len(ordered) - 1, int(q * len(ordered)))] for k, q in pick.items()}
    return {**out, "min": ordered[0], "max": ordered[-1], "count": float(len(ordered))}
