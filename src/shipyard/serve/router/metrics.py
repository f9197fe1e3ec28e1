"""The router's Prometheus metrics, in a registry of its own."""

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram

from shipyard.prometheus import Sample, SnapshotCollector
from shipyard.serve.router.table import Table

TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class RouterMetrics:
    def __init__(self, table: Table) -> None:
        self.table = table
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests = Counter(
            "shipyard_router_requests_total",
            "requests answered, by deployment, version and HTTP status",
            ["deployment", "version", "code"],
            registry=self.registry,
        )
        self.ttft = Histogram(
            "shipyard_router_ttft_seconds",
            "arrival to first forwarded response byte (first token when streamed)",
            ["deployment", "version"],
            buckets=TTFT_BUCKETS,
            registry=self.registry,
        )
        self.routes = Counter(
            "shipyard_router_routes_total",
            "routing decisions by outcome: owner and session are prefix-route hits; spilled "
            "went past a full owner, adapter to a replica holding the adapter",
            ["deployment", "outcome"],
            registry=self.registry,
        )
        self.retries = Counter(
            "shipyard_router_retries_total",
            "requests sent again to another replica after one failed before streaming",
            ["deployment"],
            registry=self.registry,
        )
        self.mirrored = Counter(
            "shipyard_router_mirrored_total",
            "requests copied to a shadow version",
            ["deployment", "version"],
            registry=self.registry,
        )
        families = {
            "shipyard_router_replica_in_flight": ("gauge", "requests in flight per replica"),
            "shipyard_router_replica_healthy": ("gauge", "1 while a replica is in rotation"),
        }
        self.registry.register(SnapshotCollector(families, self._replicas))  # type: ignore[arg-type]

    def _replicas(self) -> Iterable[Sample]:
        for state in self.table.replicas():
            labels = {"replica": state.name, "url": state.url}
            yield "shipyard_router_replica_in_flight", labels, state.in_flight
            yield "shipyard_router_replica_healthy", labels, int(state.healthy)
