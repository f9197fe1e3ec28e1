"""Prometheus metrics of every queue, read from the database at scrape time.

The counts live in the database, so any host renders the same figures for the whole queue: a
scrape of `shipyard queue stats --prometheus` (or a node exporter's textfile collector reading
it) sees every worker's claims and completions.
"""

from collections.abc import Iterator, Sequence

from prometheus_client import generate_latest

from shipyard.prometheus import Families, Sample, snapshot_registry
from shipyard.queue.model import QueueStats

FAMILIES: Families = {
    "shipyard_queue_depth_items": ("gauge", "items claimable now"),
    "shipyard_queue_delayed_items": ("gauge", "ready items whose not-before time is ahead"),
    "shipyard_queue_oldest_ready_age_seconds": (
        "gauge",
        "how long the longest-waiting claimable item has waited",
    ),
    "shipyard_queue_in_flight_items": ("gauge", "items under a live or expired lease"),
    "shipyard_queue_done_items": ("gauge", "items completed"),
    "shipyard_queue_dead_items": ("gauge", "items dead-lettered after their last attempt"),
    "shipyard_queue_claims_total": ("counter", "leases handed out"),
    "shipyard_queue_completions_total": ("counter", "leases that ended in a completion"),
}


def samples(stats: Sequence[QueueStats]) -> Iterator[Sample]:
    for s in stats:
        labels = {"queue": s.queue}
        yield "shipyard_queue_depth_items", labels, s.ready
        yield "shipyard_queue_delayed_items", labels, s.waiting
        yield "shipyard_queue_oldest_ready_age_seconds", labels, s.oldest_ready_age
        yield "shipyard_queue_in_flight_items", labels, s.leased
        yield "shipyard_queue_done_items", labels, s.done
        yield "shipyard_queue_dead_items", labels, s.dead
        yield "shipyard_queue_claims_total", labels, s.claims
        yield "shipyard_queue_completions_total", labels, s.completions


def render(stats: Sequence[QueueStats]) -> str:
    """The Prometheus text format of `stats`."""
    return generate_latest(snapshot_registry(FAMILIES, lambda: samples(stats))).decode()
