"""Counters and gauges rendered in the Prometheus text format by the daemon's `GET /metrics`."""

from collections import defaultdict

Labels = tuple[tuple[str, str], ...]

HELP = {
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
    "shipyard_peer_request_failures_total": ("counter", "piece requests that failed, by reason"),
    "shipyard_peer_hedged_requests_total": ("counter", "duplicate requests for slow pieces"),
    "shipyard_peer_store_failures_total": ("counter", "verified pieces the local store refused"),
    "shipyard_peer_blamed_peers": ("gauge", "peers avoided after serving wrong bytes"),
    "shipyard_peer_members_alive": ("gauge", "live members in this peer's gossip view"),
    "shipyard_peer_artifact_pieces_held": ("gauge", "pieces held of each artifact being fetched"),
    "shipyard_peer_artifact_pieces_wanted": ("gauge", "pieces wanted of each artifact"),
}


class Metrics:
    def __init__(self) -> None:
        self.values: dict[str, dict[Labels, float]] = defaultdict(lambda: defaultdict(float))

    def inc(self, name: str, value: float = 1, **labels: str) -> None:
        self.values[name][tuple(sorted(labels.items()))] += value

    def set(self, name: str, value: float, **labels: str) -> None:
        self.values[name][tuple(sorted(labels.items()))] = value

    def render(self) -> str:
        lines = []
        for name, (kind, help_text) in HELP.items():
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
            for labels, value in sorted(self.values.get(name, {}).items()):
                text = ",".join(f'{k}="{v}"' for k, v in labels)
                shown = int(value) if float(value).is_integer() else value
                lines.append(f"{name}{{{text}}} {shown}" if text else f"{name} {shown}")
        return "\n".join(lines) + "\n"
