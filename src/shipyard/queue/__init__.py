"""A leased work queue on Shipyard's database: SQLite by default, PostgreSQL for many hosts.

`open_queue()` gives a `Queue` on the configured database (`SHIPYARD_DB`); `run_worker` runs a
command per item (`shipyard queue worker`).
"""

from shipyard.db import open_database
from shipyard.queue.core import CHANNEL, Queue, default_owner
from shipyard.queue.model import Attempt, Item, ItemRecord, QueueStats, StaleLease


def open_queue(url: str | None = None, owner: str | None = None) -> Queue:
    """The queue on `url` (default: the configured database)."""
    return Queue(open_database(url), owner=owner)


__all__ = [
    "CHANNEL",
    "Attempt",
    "Item",
    "ItemRecord",
    "Queue",
    "QueueStats",
    "StaleLease",
    "default_owner",
    "open_queue",
]
