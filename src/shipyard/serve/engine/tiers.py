"""Per-tier queues and admission on the estimated KV footprint (prompt + max tokens).

Arrival: a request whose footprint can never fit is refused (400); a batch request that would push
the reserved plus queued footprint over the budget is shed at once (429, Retry-After), and any
tier is shed when its queue is full. Start: the engine takes the first request, interactive before
standard before batch (FIFO within a tier), that fits the budget next to the running ones; when an
interactive or standard request cannot fit, the newest running batch request is preempted for it.
"""

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from shipyard.serve.engine.request import TIERS, Request, Tier


class Overloaded(Exception):
    """Refused now, try later: the caller answers 429 with Retry-After."""

    def __init__(self, message: str, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class TooLarge(Exception):
    """Can never fit this replica: the caller answers 400."""


@dataclass
class Admission:
    budget_bytes: int
    bytes_per_token: int
    max_queue: int = 256  # per tier

    def cost(self, request: Request) -> int:
        return request.footprint_tokens() * self.bytes_per_token


class TierQueues:
    def __init__(self, admission: Admission) -> None:
        self.admission = admission
        self.queues: dict[Tier, deque[Request]] = {t: deque() for t in TIERS}
        self.reserved = 0  # bytes held by running requests
        self._lock = threading.Lock()

    def depth(self) -> dict[str, int]:
        with self._lock:
            return {t: len(q) for t, q in self.queues.items()}

    def push(self, request: Request) -> None:
        cost = self.admission.cost(request)
        budget = self.admission.budget_bytes
        if cost > budget:
            raise TooLarge(
                f"{request.footprint_tokens()} tokens (prompt + max_tokens) need {cost} bytes "
                f"of KV cache, over this replica's budget of {budget}"
            )
        with self._lock:
            queue = self.queues[request.tier]
            if len(queue) >= self.admission.max_queue:
                raise Overloaded(f"the {request.tier} queue is full ({len(queue)} waiting)")
            if request.tier == "batch":
                queued = sum(self.admission.cost(r) for q in self.queues.values() for r in q)
                if self.reserved + queued + cost > budget:
                    raise Overloaded("over the KV budget: batch requests are shed first")
            queue.append(request)

    def pop_fitting(
        self,
        running: int,
        max_batch: int,
        can_start: Callable[[Request], bool],
        batch_cost: Callable[[Request], int] | None = None,
    ) -> Request | None:
        """The next request to start, reserving its footprint; None if none fits now.

        A request that `can_start` refuses (its adapter is not resident yet) keeps its place and
        lets the next one in its tier go first; one that does not fit the budget holds its tier
        and every lower one back. `batch_cost(r)`: the running batch's bytes at most with `r` in
        it, when that is more than the sum of the reservations (a padded batch).
        """
        if running >= max_batch:
            return None
        with self._lock:
            for tier in TIERS:
                queue = self.queues[tier]
                for request in [r for r in queue if r.cancelled.is_set()]:
                    queue.remove(request)
                for request in queue:
                    if not can_start(request):
                        continue
                    cost = self.admission.cost(request)
                    need = self.reserved + cost
                    if batch_cost is not None:
                        need = max(need, batch_cost(request))
                    if need > self.admission.budget_bytes:
                        return None
                    self.reserved += cost
                    queue.remove(request)
                    return request
        return None

    def waiting_head(self) -> Request | None:
        """The first interactive or standard request waiting (preemption may make room)."""
        with self._lock:
            for tier in ("interactive", "standard"):
                for request in self.queues[tier]:
                    if not request.cancelled.is_set():
                        return request
        return None

    def release(self, request: Request) -> None:
        with self._lock:
            self.reserved -= self.admission.cost(request)

    def drain(self) -> list[Request]:
        with self._lock:
            out = [r for q in self.queues.values() for r in q]
            for q in self.queues.values():
                q.clear()
            return out
