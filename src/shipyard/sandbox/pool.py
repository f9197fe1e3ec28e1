"""A warm pool of started sandboxes for one (image, limits), sized by Little's law.

Sandboxes that must be ready within a cold start's time number λ × W (Little's law: arrivals per
second × seconds a start takes), so that is how many are kept starting or idle, times a burst
headroom, plus a floor; λ is measured over the last `window_s` seconds, W is a moving average of
measured cold starts. The refill thread starts a whole shortfall at once and does not wait for
them: a sandbox joins the pool as soon as bubblewrap runs, and whoever takes it waits out what is
left of its start. A miss (the pool is empty) starts one cold and counts it.
"""

import logging
import math
import threading
import time
from collections import deque
from dataclasses import dataclass

from shipyard.errors import StorageError
from shipyard.sandbox.box import Sandbox
from shipyard.sandbox.host import Host
from shipyard.sandbox.image import Image
from shipyard.sandbox.limits import Limits

log = logging.getLogger("shipyard.sandbox")


@dataclass(frozen=True)
class PoolConfig:
    min_idle: int = 2  # the floor: a lone arrival after a quiet spell is still warm
    max_idle: int = 32
    headroom: float = 1.0  # the burst margin over λ × W (1.0: twice the steady need)
    window_s: float = 10.0  # how far back arrivals count toward λ


class WarmPool:
    def __init__(self, host: Host, image: Image, limits: Limits, config: PoolConfig) -> None:
        self.host = host
        self.image = image
        self.limits = limits
        self.config = config
        self.idle: deque[Sandbox] = deque()  # started; the oldest are likely ready
        self.hits = 0
        self.misses = 0
        self.cold_start_s = 0.1  # W, until measured
        self._arrivals: deque[float] = deque()
        self._wake = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._refill, name="sandbox-pool", daemon=True)
        self._thread.start()

    def rate(self) -> float:
        """λ: arrivals per second over the window."""
        now = time.monotonic()
        while self._arrivals and self._arrivals[0] < now - self.config.window_s:
            self._arrivals.popleft()
        return len(self._arrivals) / self.config.window_s

    def target(self) -> int:
        """How many to keep idle or starting: ⌈λ·W·(1 + headroom)⌉ + floor, capped."""
        need = self.rate() * self.cold_start_s * (1 + self.config.headroom)
        return min(self.config.max_idle, math.ceil(need) + self.config.min_idle)

    def take(self) -> tuple[Sandbox, bool]:
        """A ready sandbox, and whether it came from the pool (warm) or was started now."""
        with self._wake:
            self._arrivals.append(time.monotonic())
            self._wake.notify()
        while True:
            with self._wake:
                box = self.idle.popleft() if self.idle else None
            if box is None:
                break
            if self._ready(box):
                self.hits += 1
                return box, True
        self.misses += 1
        box = self.host.start(self.image, self.limits)
        if not self._ready(box):
            raise StorageError(f"sandbox {box.id} did not start: {box.dead}")
        return box, False

    def _ready(self, box: Sandbox) -> bool:
        """Wait out the rest of `box`'s start; a box that died or failed is cleaned up."""
        if box.process.poll() is not None and not box.ready_s:
            self.host.finish(box, "died before use")
            return False
        try:
            waited = box.wait_ready()
        except StorageError as exc:
            log.warning("warm pool for %s: %s", self.image.id, exc)
            self.host.finish(box, box.dead or "failed to start")
            return False
        if waited:  # a start seen to its end: a measurement of W
            self.cold_start_s = 0.8 * self.cold_start_s + 0.2 * box.ready_s
        return True

    def _refill(self) -> None:
        while True:
            with self._wake:
                while not self._stopped and len(self.idle) >= self.target():
                    self._wake.wait(0.5)  # also re-reads λ as arrivals age out of the window
                if self._stopped:
                    return
                count = self.target() - len(self.idle)
            for _ in range(count):
                try:
                    box = self.host.start(self.image, self.limits)
                except (StorageError, OSError) as exc:
                    log.warning("warm pool for %s: cannot start a sandbox: %s", self.image.id, exc)
                    time.sleep(1.0)  # a host that cannot start sandboxes now: do not spin
                    break
                with self._wake:
                    if self._stopped:
                        self.host.finish(box, "the pool closed")
                        return
                    self.idle.append(box)

    def close(self) -> None:
        with self._wake:
            self._stopped = True
            self._wake.notify_all()
        self._thread.join(30)
        while self.idle:
            self.host.finish(self.idle.popleft(), "the pool closed")
