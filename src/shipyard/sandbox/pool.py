"""A warm pool of started sandboxes for one (image, limits), sized by Little's law.

Sandboxes that must be ready within a cold start's time number λ × W (Little's law: arrivals per
second × seconds a start takes), so that is how many are kept starting or idle, times a burst
headroom, plus a floor; λ is measured over the last `window_s` seconds, W is a moving average of
measured cold starts. A miss (the pool is empty) starts one cold and counts it; the refill thread
starts a whole shortfall at once, since starts overlap (they wait on the agent's start, not CPU).
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
        self.idle: deque[Sandbox] = deque()
        self.starting = 0
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
        """A ready sandbox, and whether it came warm from the pool."""
        with self._wake:
            self._arrivals.append(time.monotonic())
            box = None
            while self.idle and box is None:
                candidate = self.idle.popleft()
                if candidate.process.poll() is None:
                    box = candidate
                else:  # died while idle (killed from outside): never hand it out
                    self.host.finish(candidate, "died while idle")
            self._wake.notify()
        if box is not None:
            self.hits += 1
            return box, True
        self.misses += 1
        box = self.host.start(self.image, self.limits)
        try:
            box.wait_ready()
        finally:
            if box.dead:
                self.host.finish(box, box.dead)
        self._measured(box)
        return box, False

    def _measured(self, box: Sandbox) -> None:
        self.cold_start_s = 0.8 * self.cold_start_s + 0.2 * box.ready_s

    def _refill(self) -> None:
        while True:
            with self._wake:
                while not self._stopped and len(self.idle) + self.starting >= self.target():
                    self._wake.wait(0.5)  # also re-reads λ as arrivals age out of the window
                if self._stopped:
                    return
                count = self.target() - len(self.idle) - self.starting
                self.starting += count
            ready, failed = self._start(count)
            with self._wake:
                self.starting -= count
                if not self._stopped:
                    self.idle.extend(ready)
                    ready = []
            for box in ready:  # the pool closed meanwhile
                self.host.finish(box, "the pool closed")
            if failed:
                time.sleep(1.0)  # a host that cannot start sandboxes now: do not spin

    def _start(self, count: int) -> tuple[list[Sandbox], bool]:
        """Start `count` sandboxes at once, then wait for each; the ready ones, and whether any
        failed (each failure logged with its reason)."""
        boxes, ready, failed = [], [], False
        try:
            for _ in range(count):
                boxes.append(self.host.start(self.image, self.limits))
        except (StorageError, OSError) as exc:
            log.warning("warm pool for %s: cannot start a sandbox: %s", self.image.id, exc)
            failed = True
        for box in boxes:
            try:
                box.wait_ready()
            except StorageError as exc:
                log.warning("warm pool for %s: %s", self.image.id, exc)
                self.host.finish(box, box.dead or "failed to start")
                failed = True
                continue
            self._measured(box)
            ready.append(box)
        return ready, failed

    def close(self) -> None:
        with self._wake:
            self._stopped = True
            self._wake.notify_all()
        self._thread.join(30)
        while self.idle:
            self.host.finish(self.idle.popleft(), "the pool closed")
