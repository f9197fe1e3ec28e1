"""The service's core: leased sandboxes from warm pools, a reaper, and the counts behind metrics.

Every sandbox handed out has a TTL (it is destroyed when that passes, whatever its driver says)
and a lease its driver renews by heartbeat or by using it; the reaper destroys any sandbox whose
lease or TTL has run out, even mid-exec (the exec then ends `killed`). At start the manager reaps
what a previous run of the service left (it may have been SIGKILLed): recorded processes,
their cgroups, any group under this service's parents.
"""

import collections
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from shipyard.errors import InvalidInput, NotFound
from shipyard.prometheus import Families, Sample
from shipyard.sandbox.box import Sandbox
from shipyard.sandbox.host import Host
from shipyard.sandbox.limits import Limits, Result
from shipyard.sandbox.pool import PoolConfig, WarmPool

FAMILIES: Families = {
    "shipyard_sandbox_starts_total": ("counter", "Sandboxes handed out, by pool hit or cold start"),
    "shipyard_sandbox_cold_start_seconds": ("gauge", "Moving average of a cold start, per image"),
    "shipyard_sandbox_pool_idle": ("gauge", "Started, idle sandboxes per image"),
    "shipyard_sandbox_pool_target": ("gauge", "Little's-law pool size per image"),
    "shipyard_sandbox_arrival_rate_per_second": ("gauge", "Measured creates per second, per image"),
    "shipyard_sandbox_active": ("gauge", "Sandboxes leased to drivers now"),
    "shipyard_sandbox_execs_total": ("counter", "Execs by outcome"),
    "shipyard_sandbox_reaped_total": ("counter", "Sandboxes reaped, by reason"),
    "shipyard_sandbox_confinement": ("gauge", "1 for the mechanism enforcing each cap"),
}


_NAMES = {"ttl": "TTL", "lease": "lease"}


@dataclass
class Lease:
    box: Sandbox
    lease_s: float
    renewed: float
    expires: float  # the TTL, fixed at create
    busy: int = 0  # execs running now


class Manager:
    def __init__(
        self,
        host: Host,
        pool: PoolConfig | None = None,
        lease_s: float = 15.0,
        ttl_s: float = 600.0,
        reap_every_s: float = 0.25,
    ) -> None:
        self.host = host
        self.pool_config = pool or PoolConfig()
        self.lease_s = lease_s
        self.ttl_s = ttl_s
        self.pools: dict[tuple[Any, ...], WarmPool] = {}
        self.leases: dict[str, Lease] = {}
        self.outcomes: collections.Counter[str] = collections.Counter()
        self.reaped: collections.Counter[str] = collections.Counter()
        self.reaped["orphan"] += host.reap_orphans()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._every = reap_every_s
        self._cleanup = ThreadPoolExecutor(1, thread_name_prefix="sandbox-cleanup")
        self._reaper = threading.Thread(target=self._reap_loop, name="sandbox-reaper", daemon=True)
        self._reaper.start()

    # The API (each call's arguments come from a client: checked here)

    def create(
        self,
        image: str = "host",
        limits: Limits | None = None,
        ttl_s: float | None = None,
        lease_s: float | None = None,
    ) -> dict[str, Any]:
        limits = limits or Limits()
        ttl = _seconds(ttl_s, "ttl_s", self.ttl_s)
        lease = _seconds(lease_s, "lease_s", self.lease_s)
        resolved = self.host.images.resolve(image)
        key = (resolved.id, limits.key())
        with self._lock:
            pool = self.pools.get(key)
            if pool is None:
                pool = self.pools[key] = WarmPool(self.host, resolved, limits, self.pool_config)
        box, warm = pool.take()
        now = time.monotonic()
        with self._lock:
            self.leases[box.id] = Lease(box, lease, now, now + ttl)
        return {"id": box.id, "image": resolved.id, "warm": warm}

    def sandbox(self, sandbox_id: Any) -> Sandbox:
        with self._lock:
            lease = self.leases.get(sandbox_id) if isinstance(sandbox_id, str) else None
            if lease is None:
                raise NotFound(
                    f"no sandbox {str(sandbox_id)[:40]!r} (closed, reaped or never made)"
                )
            lease.renewed = time.monotonic()
            return lease.box

    def exec(self, sandbox_id: Any, argv: Any, **options: Any) -> Result:
        box = self.sandbox(sandbox_id)
        lease = self._busy(sandbox_id, +1)
        try:
            result = box.exec(argv, **options)
        finally:
            self._busy(sandbox_id, -1, lease)
        with self._lock:
            self.outcomes[result.outcome.value] += 1
        return result

    def _busy(self, sandbox_id: Any, step: int, lease: Lease | None = None) -> Lease | None:
        """Count an exec in or out: a running exec keeps its lease (the TTL still applies)."""
        with self._lock:
            lease = lease or self.leases.get(sandbox_id)
            if lease is not None:
                lease.busy += step
                lease.renewed = time.monotonic()
            return lease

    def heartbeat(self, ids: Iterable[Any]) -> list[str]:
        """Renew each lease; the ids that are gone (closed or reaped)."""
        gone = []
        now = time.monotonic()
        with self._lock:
            for sandbox_id in ids:
                lease = self.leases.get(sandbox_id) if isinstance(sandbox_id, str) else None
                if lease is None:
                    gone.append(str(sandbox_id)[:40])
                else:
                    lease.renewed = now
        return gone

    def close(self, sandbox_id: Any, reason: str = "closed by its driver") -> None:
        with self._lock:
            lease = self.leases.pop(sandbox_id, None) if isinstance(sandbox_id, str) else None
        if lease is None:
            raise NotFound(f"no sandbox {str(sandbox_id)[:40]!r} (closed, reaped or never made)")
        self._finish_later(lease.box, reason)

    def _finish_later(self, box: Sandbox, reason: str) -> None:
        """SIGKILL now; wait for the exit and clean up off the caller's path (a driver waits
        for its close, not for the kernel to tear a namespace down)."""
        box.kill_now(reason)
        self._cleanup.submit(self.host.finish, box, reason)

    # Reaping

    def _reap_loop(self) -> None:
        while not self._stop.wait(self._every):
            self.reap()

    def reap(self) -> int:
        """Destroy every sandbox past its TTL, or past its lease with no exec running."""
        now = time.monotonic()
        with self._lock:
            due = [
                (sandbox_id, "ttl" if now > lease.expires else "lease")
                for sandbox_id, lease in self.leases.items()
                if now > lease.expires or (not lease.busy and now > lease.renewed + lease.lease_s)
            ]
            boxes = [(self.leases.pop(sandbox_id).box, reason) for sandbox_id, reason in due]
        for box, reason in boxes:
            self.reaped[reason] += 1
            self._finish_later(box, f"reaped: its {_NAMES[reason]} ran out")
        return len(boxes)

    def shutdown(self) -> None:
        self._stop.set()
        self._reaper.join(10)
        self._cleanup.shutdown(wait=True)
        with self._lock:
            pools, self.pools = list(self.pools.values()), {}
            leases, self.leases = list(self.leases.values()), {}
        for pool in pools:
            pool.close()
        for lease in leases:
            self.host.finish(lease.box, "the service stopped")
        self.host.close()

    # Reporting

    def status(self) -> dict[str, Any]:
        with self._lock:
            pools = [
                {
                    "image": pool.image.id,
                    "limits": pool.limits.to_json(),
                    "idle": len(pool.idle),
                    "target": pool.target(),
                    "arrival_rate_per_s": round(pool.rate(), 3),
                    "cold_start_s": round(pool.cold_start_s, 4),
                    "hits": pool.hits,
                    "misses": pool.misses,
                }
                for pool in self.pools.values()
            ]
            active = len(self.leases)
        return {
            "confinement": self.host.confinement.describe(),
            "active": active,
            "pools": pools,
            "outcomes": dict(self.outcomes),
            "reaped": dict(self.reaped),
        }

    def samples(self) -> Iterable[Sample]:
        status = self.status()
        hits = sum(p["hits"] for p in status["pools"])
        misses = sum(p["misses"] for p in status["pools"])
        yield "shipyard_sandbox_starts_total", {"kind": "warm"}, hits
        yield "shipyard_sandbox_starts_total", {"kind": "cold"}, misses
        for pool in status["pools"]:
            image = {"image": pool["image"][:16]}
            yield "shipyard_sandbox_cold_start_seconds", image, pool["cold_start_s"]
            yield "shipyard_sandbox_pool_idle", image, pool["idle"]
            yield "shipyard_sandbox_pool_target", image, pool["target"]
            yield "shipyard_sandbox_arrival_rate_per_second", image, pool["arrival_rate_per_s"]
        yield "shipyard_sandbox_active", {}, status["active"]
        for outcome, count in status["outcomes"].items():
            yield "shipyard_sandbox_execs_total", {"outcome": outcome}, count
        for reason, count in status["reaped"].items():
            yield "shipyard_sandbox_reaped_total", {"reason": reason}, count
        for cap in ("memory", "pids", "cpu"):
            mechanism = self.host.confinement.mechanism(cap)
            yield "shipyard_sandbox_confinement", {"cap": cap, "mechanism": mechanism}, 1


def _seconds(value: Any, name: str, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 86400:
        raise InvalidInput(f"{name}: expected seconds in (0, 86400], not {value!r}")
    return float(value)
