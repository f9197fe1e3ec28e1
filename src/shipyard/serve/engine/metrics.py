"""The engine's Prometheus metrics, on a registry of its own (never the process default)."""

from collections.abc import Callable
from functools import partial

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from shipyard.serve.engine.request import TIERS

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class EngineMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.ttft = Histogram(
            "shipyard_serve_ttft_seconds",
            "Time from a request's arrival to its first token",
            ["tier"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            "shipyard_serve_inter_token_seconds",
            "Time between consecutive tokens of one request",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_depth = Gauge(
            "shipyard_serve_queue_depth", "Requests waiting, per tier", ["tier"], registry=r
        )
        self.running = Gauge("shipyard_serve_running", "Requests in the running batch", registry=r)
        self.kv_reserved = Gauge(
            "shipyard_serve_kv_reserved_bytes",
            "KV bytes reserved by running requests (prompt + max_tokens each)",
            registry=r,
        )
        self.prefix_bytes = Gauge(
            "shipyard_serve_prefix_cache_bytes", "Bytes held by the prefix cache", registry=r
        )
        self.prefix_lookups = Counter(
            "shipyard_serve_prefix_lookups", "Prefix-cache lookups (one per prefill)", registry=r
        )
        self.prefix_hits = Counter(
            "shipyard_serve_prefix_hits", "Lookups that reused at least one block", registry=r
        )
        self.prefix_hit_ratio = Gauge(
            "shipyard_serve_prefix_hit_ratio",
            "Prompt tokens whose KV came from the prefix cache, over all prompt tokens",
            registry=r,
        )
        self.prompt_tokens = Counter(
            "shipyard_serve_prompt_tokens",
            "Prompt tokens, by where their KV came from",
            ["source"],
            registry=r,
        )
        self.generated = Counter("shipyard_serve_generated_tokens", "Tokens generated", registry=r)
        self.requests = Counter(
            "shipyard_serve_requests",
            "Requests finished, by tier and outcome",
            ["tier", "outcome"],
            registry=r,
        )
        self.adapter_loads = Counter(
            "shipyard_serve_adapter_loads",
            "Adapters loaded into a slot, by where they came from",
            ["source"],
            registry=r,
        )

    def bind_queue(self, depth: Callable[[], dict[str, int]]) -> None:
        for tier in TIERS:
            self.queue_depth.labels(tier).set_function(partial(_depth_of, depth, tier))


def _depth_of(depth: Callable[[], dict[str, int]], tier: str) -> float:
    return float(depth()[tier])
