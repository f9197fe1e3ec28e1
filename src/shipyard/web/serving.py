"""Serving deployments for the console: each record, its versions' weights and replicas, and the
autoscaler's last decisions with their inputs, read from `serve.deploy`'s records."""

from pathlib import Path
from typing import Any

from shipyard.errors import StorageError
from shipyard.serve.deploy.controller import version_of
from shipyard.serve.deploy.state import Records, pid_alive

LAST_DECISIONS = 20


def _weights(record: dict[str, Any]) -> dict[str, float]:
    """Each version's share of traffic, as the controller gives the router (see `weights`)."""
    current, rollout = record.get("current"), record.get("rollout")
    if not isinstance(current, str):
        return {}
    weights = {current: 1.0}
    if isinstance(rollout, dict) and rollout.get("status") == "running":
        stages = record.get("spec", {}).get("canary", {}).get("stages") or [100]
        stage = rollout.get("stage", 0)
        share = float(stages[stage]) / 100 if 0 <= stage < len(stages) else 0.0
        weights = {current: 1.0 - share, version_of(str(rollout.get("candidate"))): share}
    previous = record.get("previous")
    if isinstance(previous, str) and previous in (record.get("replicas") or {}):
        weights.setdefault(previous, 0.0)
    return weights


def _summary(name: str, record: dict[str, Any]) -> dict[str, Any]:
    replicas = record.get("replicas") or {}
    status = str(record.get("status", "unknown"))
    if status == "running" and not pid_alive(record.get("controller_pid")):
        status = "controller gone"  # the record says running, but nothing is
    return {
        "name": name,
        "status": status,
        "model": record.get("spec", {}).get("model"),
        "current": record.get("current"),
        "previous": record.get("previous"),
        "replicas": sum(len(live) for live in replicas.values() if isinstance(live, list)),
        "scaled_to_zero": bool(record.get("scaled_to_zero")),
        "updated": record.get("updated"),
    }


def deployments(home: Path) -> list[dict[str, Any]]:
    records = Records(home)
    return [_summary(name, records.read(name)) for name in records.names()]


def deployment(home: Path, name: str) -> dict[str, Any]:
    records = Records(home)
    record = records.read(name)
    replicas = record.get("replicas") or {}
    artifacts = record.get("artifacts") or {}
    weights = _weights(record)
    versions = [
        {
            "version": version,
            "artifact": artifacts.get(version),
            "weight": weights.get(version, 0.0),
            "replicas": replicas.get(version, []),
        }
        for version in sorted(set(weights) | set(replicas), key=lambda v: -weights.get(v, 0.0))
    ]
    try:
        logged = records.decisions(name)
    except ValueError as exc:
        raise StorageError(f"deployment {name!r}: decision log is damaged ({exc})") from None
    decisions = [d for d in logged if isinstance(d, dict) and d.get("kind") == "autoscale"]
    rollout = record.get("rollout")
    return {
        **_summary(name, record),
        "router": record.get("router"),
        "endpoint": record.get("endpoint"),
        "versions": versions,
        "rollout": rollout if isinstance(rollout, dict) else None,
        "decisions": decisions[-LAST_DECISIONS:][::-1],
    }
