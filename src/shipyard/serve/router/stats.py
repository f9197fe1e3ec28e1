"""Per-version counters since the deployment's last PUT, and the mirrored-traffic log.

TTFT here is what the router sees: from a request's arrival to the first response byte it
forwards (a streamed request's first token; for an unstreamed one, the whole answer). Percentiles
are over the last `WINDOW` requests of the version.
"""

import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

WINDOW = 10_000
MIRROR_LOG = 1000
MAX_TEXT = 64 << 10


def percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank `q`-th percentile (0 < q <= 100), None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


@dataclass
class VersionStats:
    requests: int = 0
    errors: int = 0
    retries: int = 0
    ttft_s: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))

    def record(self, ttft_s: float | None, error: bool) -> None:
        self.requests += 1
        self.errors += int(error)
        if ttft_s is not None:
            self.ttft_s.append(ttft_s)

    def to_json(self) -> dict[str, Any]:
        window = list(self.ttft_s)
        p50, p99 = percentile(window, 50), percentile(window, 99)
        return {
            "requests": self.requests,
            "errors": self.errors,
            "retries": self.retries,
            "error_rate": self.errors / self.requests if self.requests else 0.0,
            "ttft_ms_p50": None if p50 is None else round(p50 * 1000, 3),
            "ttft_ms_p99": None if p99 is None else round(p99 * 1000, 3),
        }


@dataclass(frozen=True)
class MirrorRecord:
    """One mirrored request: what the primary and the shadow version answered."""

    request_id: str
    time: float
    request: dict[str, Any]
    primary_version: str
    primary_status: int
    primary_text: str
    shadow_version: str
    shadow_status: int
    shadow_text: str
    shadow_error: str
    shadow_latency_s: float

    def to_json(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "time": self.time,
            "request": self.request,
            "primary": {
                "version": self.primary_version,
                "status": self.primary_status,
                "text": self.primary_text,
            },
            "shadow": {
                "version": self.shadow_version,
                "status": self.shadow_status,
                "text": self.shadow_text,
                "error": self.shadow_error,
                "latency_s": round(self.shadow_latency_s, 6),
            },
        }


@dataclass
class DeploymentStats:
    since: float = field(default_factory=time.time)
    versions: dict[str, VersionStats] = field(default_factory=dict)
    mirrored: deque[MirrorRecord] = field(default_factory=lambda: deque(maxlen=MIRROR_LOG))

    def version(self, name: str) -> VersionStats:
        return self.versions.setdefault(name, VersionStats())
