"""A deployment as the router's admin API receives it: versions, weights, replicas, a mirror.

`PUT /admin/deployments/{name}` sends the whole deployment; the router replaces what it had
(split, mirror and counters), so nothing of an earlier rollout's split survives it.

    {"versions": [{"version": "v1", "weight": 0.95,
                   "replicas": [{"name": "r0", "url": "http://127.0.0.1:8001",
                                 "adapters": ["sql-lora"]}]},
                  {"version": "v2", "weight": 0.05, "replicas": [...]}],
     "mirror": {"version": "v3", "fraction": 0.1},
     "api_keys": ["sha256:..."]}

A version may have weight 0 (a shadow that only gets mirrored traffic). Replica names and URLs
are unique within a deployment; a replica's `adapters` are the adapter names it can serve.
`api_keys` (optional) are hashes of the keys inference on this deployment needs
(`shipyard.httpguard.apikeys`); without them inference is open.
"""

import math
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from shipyard.errors import InvalidInput
from shipyard.httpguard.apikeys import OPEN, ApiKeys, parse_hashes

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
MAX_VERSIONS = 16
MAX_REPLICAS = 256
MAX_ADAPTERS = 1024


@dataclass(frozen=True)
class ReplicaSpec:
    name: str
    url: str
    adapters: frozenset[str]


@dataclass(frozen=True)
class VersionSpec:
    version: str
    weight: float
    replicas: tuple[ReplicaSpec, ...]


@dataclass(frozen=True)
class MirrorSpec:
    version: str
    fraction: float


@dataclass(frozen=True)
class DeploymentSpec:
    name: str
    versions: tuple[VersionSpec, ...]
    mirror: MirrorSpec | None
    keys: ApiKeys = OPEN

    def version(self, name: str) -> VersionSpec:
        return next(v for v in self.versions if v.version == name)

    def adapters(self) -> frozenset[str]:
        return frozenset(a for v in self.versions for r in v.replicas for a in r.adapters)

    def to_json(self) -> dict[str, Any]:
        return {
            "versions": [
                {
                    "version": v.version,
                    "weight": v.weight,
                    "replicas": [
                        {"name": r.name, "url": r.url, "adapters": sorted(r.adapters)}
                        for r in v.replicas
                    ],
                }
                for v in self.versions
            ],
            "mirror": None
            if self.mirror is None
            else {"version": self.mirror.version, "fraction": self.mirror.fraction},
        }


def check_name(value: Any, field: str) -> str:
    if not isinstance(value, str) or not NAME.fullmatch(value):
        shown = repr(value)[:60] if isinstance(value, str) else type(value).__name__
        raise InvalidInput(
            f"{field}: expected 1 to 128 of A-Z a-z 0-9 . _ - (not starting with . _ -), "
            f"got {shown}"
        )
    return value


def parse_deployment(name: str, body: Any) -> DeploymentSpec:
    """The deployment in a PUT body, or InvalidInput naming the first bad field."""
    check_name(name, "deployment name")
    if not isinstance(body, dict):
        raise InvalidInput("body: expected a JSON object with 'versions'")
    _only(body, {"versions", "mirror", "api_keys"}, "body")
    raw_versions = body.get("versions")
    if not isinstance(raw_versions, list) or not 1 <= len(raw_versions) <= MAX_VERSIONS:
        raise InvalidInput(f"versions: expected a list of 1 to {MAX_VERSIONS} versions")
    versions = tuple(_version(v, f"versions[{i}]") for i, v in enumerate(raw_versions))
    _unique([v.version for v in versions], "versions[].version")
    _unique([r.name for v in versions for r in v.replicas], "replica name")
    _unique([r.url for v in versions for r in v.replicas], "replica url")
    if sum(v.weight for v in versions) <= 0:
        raise InvalidInput("versions[].weight: at least one version needs a weight above 0")
    mirror = _mirror(body.get("mirror"), {v.version for v in versions})
    keys = ApiKeys(parse_hashes(body.get("api_keys"), "api_keys"))
    return DeploymentSpec(name, versions, mirror, keys)


def _version(raw: Any, where: str) -> VersionSpec:
    if not isinstance(raw, dict):
        raise InvalidInput(f"{where}: expected an object with version, weight and replicas")
    _only(raw, {"version", "weight", "replicas"}, where)
    version = check_name(raw.get("version"), f"{where}.version")
    weight = _fraction(raw.get("weight", 1.0), f"{where}.weight", upper=None)
    replicas = raw.get("replicas")
    if not isinstance(replicas, list) or not 1 <= len(replicas) <= MAX_REPLICAS:
        raise InvalidInput(f"{where}.replicas: expected a list of 1 to {MAX_REPLICAS} replicas")
    return VersionSpec(
        version,
        weight,
        tuple(_replica(r, f"{where}.replicas[{i}]") for i, r in enumerate(replicas)),
    )


def _replica(raw: Any, where: str) -> ReplicaSpec:
    if not isinstance(raw, dict):
        raise InvalidInput(f"{where}: expected an object with name, url and adapters")
    _only(raw, {"name", "url", "adapters"}, where)
    name = check_name(raw.get("name"), f"{where}.name")
    url = raw.get("url")
    parsed = urlparse(url) if isinstance(url, str) and len(url) <= 2048 else None
    try:
        port = parsed.port if parsed is not None else None
    except ValueError:
        port = None
    if (
        parsed is None
        or parsed.scheme not in ("http", "https")
        or not parsed.hostname
        or port is None
        or parsed.path not in ("", "/")
        or parsed.query
        or parsed.username is not None
    ):
        raise InvalidInput(f"{where}.url: expected http://HOST:PORT, got {str(url)[:80]!r}")
    adapters = raw.get("adapters", [])
    if not isinstance(adapters, list) or len(adapters) > MAX_ADAPTERS:
        raise InvalidInput(f"{where}.adapters: expected a list of at most {MAX_ADAPTERS} names")
    names = [check_name(a, f"{where}.adapters[{i}]") for i, a in enumerate(adapters)]
    return ReplicaSpec(name, f"{parsed.scheme}://{parsed.netloc}", frozenset(names))


def _mirror(raw: Any, versions: set[str]) -> MirrorSpec | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise InvalidInput("mirror: expected null or an object with version and fraction")
    _only(raw, {"version", "fraction"}, "mirror")
    version = raw.get("version")
    if version not in versions:
        raise InvalidInput(
            f"mirror.version: {str(version)[:60]!r} is not one of this deployment's versions "
            f"({', '.join(sorted(versions))})"
        )
    return MirrorSpec(version, _fraction(raw.get("fraction"), "mirror.fraction", upper=1.0))


def _fraction(value: Any, where: str, upper: float | None) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (upper is not None and value > upper):
        bound = f"0 to {upper}" if upper is not None else "a number >= 0"
        raise InvalidInput(f"{where}: expected {bound}, got {str(value)[:40]}")
    return float(value)


def _only(raw: dict[str, Any], allowed: set[str], where: str) -> None:
    extra = sorted(set(raw) - allowed)
    if extra:
        raise InvalidInput(
            f"{where}: unknown field {extra[0][:60]!r} (allowed: {', '.join(sorted(allowed))})"
        )


def _unique(names: list[str], field: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise InvalidInput(f"{field}: {name!r} appears twice")
        seen.add(name)
