"""Prometheus metrics from a snapshot of a service's state, rendered by `prometheus_client`.

A service keeps its counts as suits it and gives a private `CollectorRegistry` a function that
lists `(name, labels, value)` samples at scrape time; `prometheus_client` writes the text format,
label escaping included. Each family is declared once with its type and help, so a sample under
an undeclared name is a bug caught at the first scrape, not a new line on a dashboard.
"""

from collections.abc import Callable, Iterable, Mapping
from typing import Literal

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

Kind = Literal["counter", "gauge"]
Families = Mapping[str, tuple[Kind, str]]  # name (counters end in _total) -> (kind, help)
Sample = tuple[str, Mapping[str, str], float]


class SnapshotCollector(Collector):
    """Yields the declared families, each with the samples `samples()` lists for it now."""

    def __init__(self, families: Families, samples: Callable[[], Iterable[Sample]]) -> None:
        self.families = families
        self.samples = samples

    def collect(self) -> Iterable[Metric]:
        made: dict[str, Metric] = {
            name: (CounterMetricFamily if kind == "counter" else GaugeMetricFamily)(name, text)
            for name, (kind, text) in self.families.items()
        }
        for name, labels, value in self.samples():
            made[name].add_sample(name, dict(labels), float(value))
        return made.values()


def snapshot_registry(
    families: Families, samples: Callable[[], Iterable[Sample]]
) -> CollectorRegistry:
    """A registry of its own (never the process-wide default) serving `samples()` per scrape."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(families, samples))
    return registry
