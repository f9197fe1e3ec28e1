"""The live service's cluster file (JSON): nodes, team quotas and policy settings.

{"nodes": [{"name": "n0", "gpus": 8, "leaf": "l0", "block": "b0"}],
 "teams": [{"team": "a", "nominal": {"gpu": 8}, "cohort": "org"}],
 "policy": {"preemption_budget": 8}, "idle_minutes": 30}
"""

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shipyard.errors import InvalidInput
from shipyard.scheduler.model import Node
from shipyard.scheduler.policy import PolicyConfig
from shipyard.scheduler.quota import TeamQuota


@dataclass(frozen=True)
class ClusterConfig:
    nodes: list[Node]
    teams: list[TeamQuota]
    policy: PolicyConfig
    idle_minutes: float = 30.0  # interactive jobs without a utilization report: warn, then reclaim


def load_config(path: Path) -> ClusterConfig:
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"cluster config {path}: unreadable ({exc})") from None
    return parse_config(raw, str(path))


def parse_config(raw: Any, where: str = "cluster config") -> ClusterConfig:
    if not isinstance(raw, dict):
        raise InvalidInput(f"{where}: expected a JSON object")
    unknown = set(raw) - {"nodes", "teams", "policy", "idle_minutes"}
    if unknown:
        raise InvalidInput(f"{where}: unknown keys {sorted(unknown)}")
    nodes = [
        _build(Node, item, f"{where}: nodes[{i}]") for i, item in enumerate(raw.get("nodes", []))
    ]
    teams = [
        _build(TeamQuota, item, f"{where}: teams[{i}]")
        for i, item in enumerate(raw.get("teams", []))
    ]
    if not nodes or not teams:
        raise InvalidInput(f"{where}: needs at least one node and one team")
    policy = _build(PolicyConfig, raw.get("policy", {}), f"{where}: policy")
    idle = raw.get("idle_minutes", 30.0)
    if not isinstance(idle, int | float) or idle <= 0:
        raise InvalidInput(f"{where}: idle_minutes must be a number > 0")
    return ClusterConfig(nodes, teams, policy, float(idle))


def _build(cls: Any, item: Any, where: str) -> Any:
    if not isinstance(item, dict):
        raise InvalidInput(f"{where}: expected an object")
    allowed = {f.name for f in dataclasses.fields(cls)}
    unknown = set(item) - allowed
    if unknown:
        raise InvalidInput(
            f"{where}: unknown fields {sorted(unknown)} (allowed: {sorted(allowed)})"
        )
    try:
        return cls(**item)
    except TypeError as exc:
        raise InvalidInput(f"{where}: {exc}") from None
