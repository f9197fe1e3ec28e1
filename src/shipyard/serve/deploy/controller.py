"""The deployment controller: replica processes, the router's view of them, and the record.

One controller runs per deployment (`shipyard serve deploy`). Each tick it replaces replicas that
died, takes the commands other processes left in the record (rollout, rollback), then either
advances a rollout (`rollout.py`) or applies the autoscaler (`scaling.py`), and rewrites the
record. Versions are named by the first 12 digits of their artifact id.
"""

import contextlib
import os
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from shipyard.errors import Conflict, InvalidInput, NotFound, ShipyardError
from shipyard.home import shipyard_home
from shipyard.httpguard import call, read_token
from shipyard.httpguard.apikeys import ApiKeys
from shipyard.serve.deploy import metrics
from shipyard.serve.deploy import replicas as rp
from shipyard.serve.deploy.activator import Activator
from shipyard.serve.deploy.canary import Rollout, candidate_weight
from shipyard.serve.deploy.evalgate import GateRun
from shipyard.serve.deploy.spec import DeploymentSpec, spec_to_dict
from shipyard.serve.deploy.state import Records, pid_alive
from shipyard.workspace import Workspace

START_TIMEOUT_S = 180.0
EXTERNAL = "external"  # the version of an engine-openai deployment's server
FULL_ID = re.compile(r"[0-9a-f]{64}")
UNHEALTHY_AFTER = 3  # /health probes unanswered in a row before a live replica is replaced
PROBE_TIMEOUT_S = 5.0  # generous: a replica busy generating on loaded CPUs answers slowly


def version_of(artifact: str) -> str:
    return artifact[:12]


class Controller:
    def __init__(
        self,
        spec: DeploymentSpec,
        router_url: str,
        home: Path | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
    ) -> None:
        self.spec = spec
        self.home = home or shipyard_home()
        self.router_url = router_url.rstrip("/")
        self.records = Records(self.home)
        self.ws = Workspace.open(self.home)
        self.start_timeout_s = start_timeout_s
        self.replicas: dict[str, list[rp.Replica]] = {}  # version -> its live replicas
        self.artifacts: dict[str, str] = {}  # version -> artifact id
        self.current = ""
        self.previous: str | None = None  # kept warm after a promotion, for `rollback`
        self.rollout: Rollout | None = None
        self.rollout_command: str | None = None
        self.events: metrics.Events = Counter()  # what /metrics counts (metrics.py)
        # The controller's loopback endpoint: /metrics, and the stand-in for a version at zero
        keys = ApiKeys(spec.api_keys)
        self.endpoint = Activator(spec.name, self.home, metrics.registry(self), keys)
        self.last_change: float | None = None
        self.scaling: dict[str, Any] = {}  # what the autoscaler loop keeps between ticks
        self.gate: GateRun | None = None  # the running rollout's eval gate (rollout.py)
        self.claimed = False  # whether start() made the record this controller's
        self.health: dict[str, dict[str, Any] | None] = {}  # replica -> its last /health
        self.misses: dict[str, int] = {}  # replica -> /health probes unanswered in a row
        self.probe_timeout_s = PROBE_TIMEOUT_S
        self._saved: dict[str, Any] | None = None
        self._serial = 0
        self._lock = threading.RLock()

    # Life cycle

    def start(self) -> None:
        """Claim the record, start `replicas.min` replicas of the spec's model, tell the router.

        Engine openai: the server at `engine.url` is the one replica, under version "external";
        it owns its model, so there is nothing to start, scale or roll out.
        """
        external = self.spec.engine.kind == "openai"
        artifact = EXTERNAL if external else self.resolve_model(self.spec.model)
        with self.records.locked(self.spec.name):
            try:
                old = self.records.read(self.spec.name)
            except ShipyardError:
                old = {}
            if old.get("status") == "running" and pid_alive(old.get("controller_pid")):
                raise Conflict(
                    f"deployment {self.spec.name!r} already has a controller "
                    f"(pid {old['controller_pid']}); stop it first"
                )
            self.current = version_of(artifact)
            self.artifacts[self.current] = artifact
            self.records.write(self.spec.name, self.snapshot(commands=old.get("commands", {})))
            self.claimed = True
        if external:
            url = str(self.spec.engine.url).rstrip("/")
            server = rp.Replica(f"{self.spec.name}-external", EXTERNAL, EXTERNAL, None, url)
            self.replicas[EXTERNAL] = [server]
        else:
            self.grow(self.current, self.spec.replicas.min)
        self.push()
        self.save()

    def close(self) -> None:
        """Stop every replica, take the deployment off the router, mark the record stopped.

        A controller that never claimed the record (its start was refused) touches neither the
        router nor the record: they belong to another controller, or to none."""
        with self._lock:
            if self.gate is not None:
                self.gate.stop()
            for replicas in self.replicas.values():
                for replica in replicas:
                    rp.stop(replica)
            self.replicas.clear()
            self.endpoint.close()
            if self.claimed:
                with contextlib.suppress(ShipyardError):  # the router may be gone already
                    call(self.admin_url, "DELETE", {}, self.token())
                self.save(status="stopped")
            self.ws.close()

    def resolve_model(self, ref: str) -> str:
        """The model artifact `ref` names, its pieces in this host's store (see `fetch`)."""
        try:
            artifact = self.ws.resolve(ref)
        except NotFound:
            # A fresh host knows no artifact yet: a full id is pulled first, then resolved.
            if not (self.spec.engine.peer and FULL_ID.fullmatch(ref)):
                raise
            artifact = ref
        self.fetch(artifact)
        kind = self.ws.manifest(artifact).kind
        if kind != "model":
            raise InvalidInput(f"{ref!r} is a {kind} artifact, not a model")
        return artifact

    def fetch(self, artifact: str) -> None:
        """With `engine.peer`: have this host's peer daemon (which stores into this
        `$SHIPYARD_HOME`'s store) pull the artifact from its peers or the origin, so the replicas
        load from local disk. An artifact already held costs one round trip."""
        if self.spec.engine.peer is None:
            return
        from shipyard.distribute.client import pull
        from shipyard.distribute.config import parse_address

        started = time.monotonic()
        result = pull(parse_address(self.spec.engine.peer, "engine.peer"), artifact)
        sources = {source: nbytes for source, (_, nbytes) in result.sources.items()}
        entry = {"kind": "pull", "artifact": artifact, "bytes": result.wanted_bytes}
        entry.update(seconds=round(time.monotonic() - started, 3), sources=sources)
        self.records.log(self.spec.name, entry)

    # Replicas

    def grow(self, version: str, count: int) -> None:
        """Start `count` more replicas of `version`, all at once, and wait until they listen."""
        if count <= 0:
            return
        artifact = self.artifacts[version]
        launched = []
        for _ in range(count):
            self._serial += 1
            name = f"{self.spec.name}-{version}-{self._serial}"
            command = rp.replica_command(self.spec, artifact, name, self.spec.api_keys)
            launched.append(
                rp.launch(command, name, version, artifact, rp.logs_dir(self.home), self.home)
            )
        with ThreadPoolExecutor(len(launched)) as pool:
            waits = [pool.submit(rp.wait_listening, r, self.start_timeout_s) for r in launched]
            errors = [e for e in (w.exception() for w in waits) if e is not None]
        ready = [r for r in launched if r.url]
        with self._lock:
            self.replicas.setdefault(version, []).extend(ready)
            if ready and version == self.current:
                self.endpoint.retry_after_s = max(r.load_s for r in ready)
        if errors:
            raise errors[0]

    def shrink(self, version: str, count: int) -> None:
        """Stop the `count` newest replicas of `version` (the router is told first)."""
        with self._lock:
            live = self.replicas.get(version, [])
            gone, self.replicas[version] = live[len(live) - count :], live[: len(live) - count]
        self.push()
        for replica in gone:
            rp.stop(replica)

    def drop(self, version: str) -> None:
        with self._lock:
            gone = self.replicas.pop(version, [])
        for replica in gone:
            rp.stop(replica)

    def reap(self) -> list[str]:
        """Replace replicas whose process exited; returns the versions that lost one."""
        dead: dict[str, int] = {}
        with self._lock:
            for version, live in self.replicas.items():
                for replica in [r for r in live if not r.alive()]:
                    live.remove(replica)
                    dead[version] = dead.get(version, 0) + 1
                    self.events["shipyard_serve_deploy_replacements_total", version] += 1
                    self.records.log(
                        self.spec.name,
                        {"kind": "replace", "replica": replica.name, "version": version},
                    )
        if dead:
            self.push()  # out of rotation before the replacements load
            for version, count in dead.items():
                self.grow(version, count)
            self.push()
        return list(dead)

    def probe(self) -> None:
        """Read every replica's /health at once; one that has not answered `UNHEALTHY_AFTER`
        probes in a row (hung, not dead) is stopped, and `reap` replaces it."""
        live = [r for replicas in list(self.replicas.values()) for r in replicas if r.process]
        if not live:
            return
        with ThreadPoolExecutor(len(live)) as pool:
            reports = list(pool.map(lambda r: rp.health(r.url, self.probe_timeout_s), live))
        for replica, report in zip(live, reports, strict=True):
            self.health[replica.name] = report
            misses = 0 if report else self.misses.get(replica.name, 0) + 1
            self.misses[replica.name] = misses
            if misses >= UNHEALTHY_AFTER:
                entry = {"kind": "unhealthy", "replica": replica.name, "probes": misses}
                self.records.log(self.spec.name, entry)
                rp.stop(replica, grace=1.0)
                self.misses.pop(replica.name)

    def count(self, version: str | None = None) -> int:
        return len(self.replicas.get(version or self.current, []))

    # Router

    @property
    def admin_url(self) -> str:
        return f"{self.router_url}/admin/deployments/{self.spec.name}"

    def token(self) -> str:
        return read_token("router", self.home)

    def push(self) -> None:
        """PUT the deployment's versions, weights and replicas to the router."""
        versions = [
            {"version": v, "weight": w, "replicas": self.router_replicas(v)}
            for v, w in self.weights().items()
        ]
        body = {"versions": versions, "mirror": None, "api_keys": list(self.spec.api_keys)}
        call(self.admin_url, "PUT", body, self.token())

    def weights(self) -> dict[str, float]:
        """Each routed version's share: the canary's split, and 0 for a warm previous version."""
        weights = {self.current: 1.0}
        if self.rollout and self.rollout.status == "running":
            share = candidate_weight(self.rollout, self.spec.canary.stages)
            weights = {self.current: 1.0 - share, version_of(self.rollout.candidate): share}
        if self.previous and self.previous in self.replicas:
            weights.setdefault(self.previous, 0.0)
        return weights

    def router_replicas(self, version: str) -> list[dict[str, Any]]:
        live = self.replicas.get(version, [])
        adapters = sorted(self.spec.adapters)
        if live:
            return [{"name": r.name, "url": r.url, "adapters": adapters} for r in live]
        return [{"name": f"{self.spec.name}-{version}-zero", "url": self.endpoint.url}]

    def stats(self) -> dict[str, Any]:
        """The router's per-version counters since the last PUT ({} when it has none)."""
        reply = call(self.admin_url, "GET", None, self.token())
        return reply if isinstance(reply, dict) else {}

    # Record

    def snapshot(self, **extra: Any) -> dict[str, Any]:
        return {
            "name": self.spec.name,
            "spec": spec_to_dict(self.spec),
            "status": "running",
            "controller_pid": os.getpid(),
            "router": self.router_url,
            "current": self.current,
            "previous": self.previous,
            "artifacts": dict(self.artifacts),
            "replicas": {v: [r.to_json() for r in live] for v, live in self.replicas.items()},
            "rollout": asdict(self.rollout) if self.rollout else None,
            "scaled_to_zero": self.count() == 0,
            "endpoint": self.endpoint.url,
            **extra,
        }

    def save(self, status: str = "running") -> None:
        """Write the controller's view into the record, unless it is what was last written."""
        view = self.snapshot(status=status)
        if view == self._saved:
            return  # the loop saves every tick: no fsync when nothing moved

        def change(record: dict[str, Any]) -> None:
            record.update(view)

        self.records.update(self.spec.name, change)
        self._saved = view

    def take_commands(self) -> list[tuple[str, dict[str, Any]]]:
        """Pending commands, marked running (oldest first)."""
        taken: list[tuple[str, dict[str, Any]]] = []

        def change(record: dict[str, Any]) -> None:
            commands = record.get("commands")
            if not isinstance(commands, dict):  # a hand-edited record: nothing to run
                record["commands"] = commands = {}
            for key, command in sorted(commands.items()):
                if isinstance(command, dict) and command.get("state") == "pending":
                    command["state"] = "running"
                    taken.append((key, dict(command)))

        self.records.update(self.spec.name, change)
        return taken

    def finish_command(self, key: str, ok: bool, message: str, exit_code: int = 0) -> None:
        def change(record: dict[str, Any]) -> None:
            command = record.setdefault("commands", {}).setdefault(key, {})
            command.update(state="done" if ok else "failed", message=message, exit_code=exit_code)

        self.records.update(self.spec.name, change)


def submit(records: Records, name: str, command: dict[str, Any]) -> str:
    """Leave `command` for the deployment's controller; returns its key."""
    key = f"{time.time():.6f}-{uuid.uuid4().hex[:8]}"

    def change(record: dict[str, Any]) -> None:
        if record.get("status") != "running" or not pid_alive(record.get("controller_pid")):
            raise InvalidInput(
                f"deployment {name!r} has no running controller: start it with "
                "`shipyard serve deploy SPEC.yaml`"
            )
        record.setdefault("commands", {})[key] = {**command, "state": "pending"}

    records.update(name, change)
    return key


def wait_command(
    records: Records, name: str, key: str, timeout: float, on_change: Callable[[Any], None]
) -> dict[str, Any]:
    """Poll the record until command `key` is done or failed; `on_change` sees each new record."""
    deadline = time.monotonic() + timeout
    seen = None
    while time.monotonic() < deadline:
        record = records.read(name)
        command = record.get("commands", {}).get(key, {})
        view = (command.get("state"), record.get("rollout"))
        if view != seen:
            seen = view
            on_change(record)
        if command.get("state") in ("done", "failed"):
            return dict(command)
        if not pid_alive(record.get("controller_pid")):
            raise InvalidInput(f"the controller of {name!r} stopped before the command finished")
        time.sleep(0.2)
    raise InvalidInput(
        f"command on {name!r} still running after {timeout:g} s; the controller carries on "
        f"(follow it with `shipyard serve status {name}`)"
    )
