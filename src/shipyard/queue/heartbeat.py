"""Keep leases alive while their holder works in the same process (a forward pass, an encoder).

A `Heartbeat` renews every lease it holds every third of the lease's length, from a thread of its
own on a connection of its own (a connection serves one thread at a time, and the holder's may be
inside a transaction). A lease found lost is dropped and noted in `lost`; the holder checks it, or
meets `StaleLease` when it completes. A database that is away skips a beat, not the lease: the
next beat may get through before the lease runs out.
"""

import threading
from collections.abc import Iterable
from types import TracebackType

from shipyard.db import Database
from shipyard.errors import ShipyardError
from shipyard.queue.core import Queue
from shipyard.queue.model import Item, StaleLease


class Heartbeat:
    def __init__(self, queue: Queue, items: Iterable[Item], lease: float) -> None:
        self._url, self._owner, self._clock = queue.db.url, queue.owner, queue.clock
        self._lease = lease
        self._lock = threading.Lock()
        self._held = {item.id: item.token for item in items}
        self.lost: dict[int, str] = {}  # item id -> why its lease was lost
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-heartbeat", daemon=True)
        self._thread.start()

    def __enter__(self) -> "Heartbeat":
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def drop(self, item_id: int) -> None:
        """The holder is ending this lease itself: stop renewing it."""
        with self._lock:
            self._held.pop(item_id, None)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        queue: Queue | None = None
        try:
            while not self._stop.wait(self._lease / 3):
                with self._lock:
                    held = list(self._held.items())
                try:
                    if queue is None:
                        queue = Queue(Database(self._url), owner=self._owner, clock=self._clock)
                    for item_id, token in held:
                        self._beat(queue, item_id, token)
                except ShipyardError:
                    continue  # the database is away: the next beat may get through
        finally:
            if queue is not None:
                queue.close()

    def _beat(self, queue: Queue, item_id: int, token: int) -> None:
        try:
            queue.heartbeat(item_id, token, self._lease)
        except StaleLease as exc:
            with self._lock:
                if self._held.pop(item_id, None) is not None:
                    self.lost[item_id] = str(exc)
