"""The daemon's counters and gauges, served as Prometheus text by its `GET /metrics`."""

from collections import defaultdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from shipyard.prometheus import Families, Sample

Labels = tuple[tuple[str, str], ...]

FAMILIES: "Families" = {
    "shipyard_peer_bytes_received_total": ("counter", "verified piece bytes fetched, by source"),
    "shipyard_peer_bytes_sent_total": ("counter", "piece bytes served to other peers"),
    "shipyard_peer_pieces_received_total": ("counter", "verified pieces fetched, by source"),
    "shipyard_peer_pieces_corrupt_total": ("counter", "pieces refused because of a bad hash"),
    "shipyard_peer_pieces_resumed_total": ("counter", "pieces found verified on disk at start"),
    "shipyard_peer_partial_bytes_resumed_total": (
        "counter",
        "bytes of stored pieces kept from transfers cut short, not fetched again",
    ),
    "shipyard_peer_partial_pieces_discarded_total": (
        "counter",
        "resumed pieces that failed verification and started over",
    ),
    "shipyard_peer_requests_served_total": ("counter", "requests this peer answered, by op"),
    "shipyard_peer_requests_refused_total": ("counter", "requests refused, by reason"),
    "shipyard_peer_request_failures_total": ("counter", "piece requests that failed, by reason"),
    "shipyard_peer_hedged_requests_total": ("counter", "duplicate requests for slow pieces"),
    "shipyard_peer_store_failures_total": ("counter", "verified pieces the local store refused"),
    "shipyard_peer_blamed_peers": ("gauge", "peers this daemon asks for nothing more"),
    "shipyard_peer_blamed_total": ("counter", "peers that lost their standing, by reason"),
    "shipyard_peer_claim_failures_total": (
        "counter",
        "requests for a piece a peer claimed that it failed to deliver, by reason",
    ),
    "shipyard_peer_isolated": (
        "gauge",
        "1 while a daemon that expects peers (seeds or a members board) knows none alive",
    ),
    "shipyard_peer_members_alive": ("gauge", "live members in this peer's gossip view"),
    "shipyard_peer_artifact_pieces_held": ("gauge", "pieces held of each artifact being fetched"),
    "shipyard_peer_artifact_pieces_wanted": ("gauge", "pieces wanted of each artifact"),
}


class Metrics:
    """Values by name and labels, updated on the daemon's event loop; a scrape renders a copy."""

    def __init__(self) -> None:
        self.values: dict[str, dict[Labels, float]] = defaultdict(lambda: defaultdict(float))
        self._registry: CollectorRegistry | None = None

    def inc(self, name: str, value: float = 1, **labels: str) -> None:
        self.values[name][tuple(sorted(labels.items()))] += value

    def set(self, name: str, value: float, **labels: str) -> None:
        self.values[name][tuple(sorted(labels.items()))] = value

    def render(self) -> bytes:
        # prometheus_client loads on the first scrape, not at start: its imports (http.server,
        # urllib, wsgiref) took 0.07-0.10 s on a busy two-core host, time a restarted daemon
        # would spend before it can listen and rejoin.
        from prometheus_client import generate_latest

        from shipyard.prometheus import snapshot_registry

        if self._registry is None:
            self._registry = snapshot_registry(FAMILIES, self._samples)
        return generate_latest(self._registry)

    def _samples(self) -> list["Sample"]:
        return [
            (name, dict(labels), value)
            for name, series in list(self.values.items())
            for labels, value in list(series.items())
        ]
