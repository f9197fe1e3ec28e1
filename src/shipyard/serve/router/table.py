"""The router's state: deployments, their versions' rings and replicas, and routing decisions.

A replica's live state (in flight, health, resident adapters) is kept by URL, so it carries over
a PUT that names the same replica again; everything else about a deployment (split, mirror,
rings, counters) is replaced whole by each PUT, so no earlier rollout's split can leak into the
next (KServe #2130).
"""

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from shipyard.errors import Conflict, NotFound, StorageError
from shipyard.serve.router.policy import Choice, Policy, Route
from shipyard.serve.router.request import MAX_NAME, InferenceRequest
from shipyard.serve.router.ring import Ring, hash64
from shipyard.serve.router.spec import DeploymentSpec, VersionSpec
from shipyard.serve.router.stats import DeploymentStats

_SCALE = float(1 << 64)


class Unavailable(StorageError):
    """No replica can take the request now (answered 503)."""


@dataclass
class ReplicaState:
    name: str
    url: str
    in_flight: int = 0
    healthy: bool = True
    adapters_loaded: frozenset[str] = frozenset()
    served_model: str | None = None
    last_error: str = ""
    health: dict[str, Any] = field(default_factory=dict)

    def mark_down(self, why: str) -> None:
        self.healthy = False
        self.last_error = why[:300]


@dataclass
class Deployment:
    spec: DeploymentSpec
    rings: dict[str, Ring]
    replicas: dict[str, dict[str, ReplicaState]]  # version -> replica name -> state
    stats: DeploymentStats = field(default_factory=DeploymentStats)

    @property
    def name(self) -> str:
        return self.spec.name


def _unit(*parts: str) -> float:
    """A deterministic number in [0, 1) from `parts`."""
    return hash64("\x00".join(parts).encode()) / _SCALE


class Table:
    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.deployments: dict[str, Deployment] = {}
        self._by_url: dict[str, ReplicaState] = {}

    # Admin

    def put(self, spec: DeploymentSpec) -> Deployment:
        """Install `spec` in place of any deployment of its name; Conflict on a name clash."""
        for other in self.deployments.values():
            if other.name == spec.name:
                continue
            if spec.name in other.spec.adapters():
                raise Conflict(
                    f"deployment {spec.name!r}: {other.name!r} serves an adapter so named"
                )
            shared = sorted(
                (spec.adapters() & other.spec.adapters()) | ({other.name} & spec.adapters())
            )
            if shared:
                raise Conflict(
                    f"deployment {spec.name!r}: adapter {shared[0]!r} is already a name in "
                    f"deployment {other.name!r}; adapter and deployment names must be unique"
                )
        deployment = Deployment(
            spec,
            {v.version: Ring(r.name for r in v.replicas) for v in spec.versions},
            {
                v.version: {r.name: self._state(r.name, r.url) for r in v.replicas}
                for v in spec.versions
            },
        )
        self.deployments[spec.name] = deployment
        self._prune()
        return deployment

    def delete(self, name: str) -> None:
        self.get(name)
        del self.deployments[name]
        self._prune()

    def get(self, name: str) -> Deployment:
        try:
            return self.deployments[name]
        except KeyError:
            raise NotFound(f"deployment {name[:MAX_NAME]!r} does not exist") from None

    def replicas(self) -> Iterator[ReplicaState]:
        return iter(list(self._by_url.values()))

    def _state(self, name: str, url: str) -> ReplicaState:
        state = self._by_url.get(url)
        if state is None:
            state = self._by_url[url] = ReplicaState(name, url)
        state.name = name
        return state

    def _prune(self) -> None:
        used = {
            s.url
            for d in self.deployments.values()
            for v in d.replicas.values()
            for s in v.values()
        }
        for url in set(self._by_url) - used:
            del self._by_url[url]

    # Routing

    def resolve(self, model: str) -> tuple[Deployment, str | None]:
        """The deployment serving `model` (a deployment or adapter name), and the adapter."""
        if model in self.deployments:
            return self.deployments[model], None
        for deployment in self.deployments.values():
            if model in deployment.spec.adapters():
                return deployment, model
        known = ", ".join(sorted(self.deployments)[:20]) or "none"
        raise NotFound(
            f"model {model!r}: no deployment or adapter of that name (deployments: {known})"
        )

    def version_for(self, deployment: Deployment, rid: str, adapter: str | None) -> VersionSpec:
        """The canary split's pick for request id `rid`, among versions serving `adapter`."""
        versions = [
            v
            for v in deployment.spec.versions
            if v.weight > 0 and (adapter is None or any(adapter in r.adapters for r in v.replicas))
        ]
        if not versions:
            raise NotFound(
                f"adapter {adapter!r}: no weighted version of {deployment.name!r} serves it"
            )
        point = _unit(deployment.name, rid) * sum(v.weight for v in versions)
        for version in versions:
            point -= version.weight
            if point < 0:
                return version
        return versions[-1]  # float rounding at the very top of the range

    def mirror_for(
        self, deployment: Deployment, rid: str, chosen: str, adapter: str | None
    ) -> VersionSpec | None:
        """The shadow version this request is copied to, if the mirror's hash says so."""
        mirror = deployment.spec.mirror
        if mirror is None or mirror.version == chosen:
            return None
        if _unit("mirror", deployment.name, rid) >= mirror.fraction:
            return None
        version = deployment.spec.version(mirror.version)
        if adapter is not None and not any(adapter in r.adapters for r in version.replicas):
            return None
        return version

    def pick(
        self,
        deployment: Deployment,
        version: str,
        request: InferenceRequest,
        adapter: str | None,
        exclude: frozenset[str] = frozenset(),
    ) -> tuple[ReplicaState, Choice]:
        """filter → score → pick: a healthy replica of `version` serving the request."""
        spec = deployment.spec.version(version)
        states = deployment.replicas[version]
        eligible = {
            r.name: states[r.name]
            for r in spec.replicas
            if states[r.name].healthy
            and r.name not in exclude
            and (adapter is None or adapter in r.adapters)
        }
        route = Route(
            f"{deployment.name}/{version}",
            f"{request.model}\x00{request.prefix}".encode(),
            adapter,
            request.session,
        )
        choice = self.policy.choose(deployment.rings[version], eligible, route)
        if choice is None:
            down = [f"{n}: {s.last_error or 'down'}" for n, s in states.items() if not s.healthy]
            raise Unavailable(
                f"deployment {deployment.name!r} version {version!r}: no healthy replica can "
                f"take this request ({'; '.join(down)[:500] or 'all tried'})"
            )
        return eligible[choice.name], choice
