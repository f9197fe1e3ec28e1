"""The controller's Prometheus metrics, read from its state at scrape time."""

from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry

from shipyard.prometheus import Families, Sample, snapshot_registry

if TYPE_CHECKING:
    from shipyard.serve.deploy.controller import Controller

FAMILIES: Families = {
    "shipyard_serve_deploy_replicas": (
        "gauge", "Live replicas of each version (role: current, candidate or previous)",
    ),
    "shipyard_serve_deploy_traffic_ratio": (
        "gauge", "Share of the deployment's requests the router sends to each version",
    ),
    "shipyard_serve_deploy_replica_start_seconds": (
        "gauge", "Seconds from launch to listening of the version's newest replica",
    ),
    "shipyard_serve_deploy_autoscale_decisions_total": (
        "counter", "Autoscaler decisions, by action (up, down, hold, zero, wake)",
    ),
    "shipyard_serve_deploy_replacements_total": (
        "counter", "Replicas started to replace one whose process exited",
    ),
    "shipyard_serve_deploy_rollouts_total": (
        "counter", "Rollouts that ended, by outcome (promoted, rolled_back)",
    ),
    "shipyard_serve_deploy_turned_away_total": (
        "counter", "Requests answered 503 + Retry-After while a version had no replica",
    ),
}  # fmt: skip

# Counted events: (family, label value); the label's name is the family's own.
Events = Counter[tuple[str, str]]
_EVENT_LABEL = {
    "shipyard_serve_deploy_autoscale_decisions_total": "action",
    "shipyard_serve_deploy_rollouts_total": "outcome",
    "shipyard_serve_deploy_replacements_total": "version",
}


def registry(ctrl: "Controller") -> CollectorRegistry:
    return snapshot_registry(FAMILIES, lambda: samples(ctrl))


def samples(ctrl: "Controller") -> Iterator[Sample]:
    name = ctrl.spec.name
    weights = ctrl.weights()
    candidate = weights.keys() - {ctrl.current, ctrl.previous}
    for version in weights.keys() | ctrl.replicas.keys():
        role = "current" if version == ctrl.current else "candidate"
        role = "previous" if version == ctrl.previous and version not in candidate else role
        labels = {"deployment": name, "version": version}
        live = ctrl.replicas.get(version, [])
        yield "shipyard_serve_deploy_replicas", {**labels, "role": role}, len(live)
        yield "shipyard_serve_deploy_traffic_ratio", labels, weights.get(version, 0.0)
        if live:
            newest = max(live, key=lambda r: r.started)
            yield "shipyard_serve_deploy_replica_start_seconds", labels, newest.load_s
    for (family, value), count in sorted(ctrl.events.items()):
        yield family, {"deployment": name, _EVENT_LABEL[family]: value}, count
    yield "shipyard_serve_deploy_turned_away_total", {"deployment": name}, ctrl.endpoint.turned_away
