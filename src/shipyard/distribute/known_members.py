"""The members a daemon last knew alive, kept in its store so that a restart can rejoin.

Seeds are only a way in, and an outage can take every one of them. A daemon brought back with
its unchanged command line (by systemd, a crash loop, a reboot) would then have nobody to
gossip with: the live members do not dial it either, since it is dead in their views until it
speaks. So a daemon keeps a sample of the members it knows alive, and a restarted one gossips
with them (`Membership.remember`) until it knows enough of the swarm again.

Layout: `members/known` holds `{"members": ["host:port", ...]}`, at most `KEEP` of them. It is
a cache: one that cannot be read is named on stderr and replaced at the next save.
"""

import json
import math
import random
import sys
from collections.abc import Collection

from shipyard.distribute.config import parse_address
from shipyard.errors import InvalidInput, NotFound
from shipyard.store.backend import Backend

KEY = "members/known"
# Enough that some are alive after any outage the swarm survives; few enough to stay one small
# write however large the swarm.
KEEP = 32
SAVE_EVERY = 5.0  # seconds between saves that replace members who died


class KnownMembers:
    """One daemon's saved members, and when to save them again."""

    def __init__(self, backend: Backend, rng: random.Random) -> None:
        self.backend = backend
        self.rng = rng
        self._saved: frozenset[str] = frozenset()
        self._saved_at = -math.inf

    def to_save(self, alive: Collection[str], now: float) -> list[str] | None:
        """The members to save now, or None when no save is due. A save is due when the last
        one holds fewer live members than it could: at once while it only grows (a host killed
        seconds after joining must remember whom it met), and at most every `SAVE_EVERY` seconds
        once saved members have died, keeping the live ones, so a large swarm's churn seldom
        costs a write. Nothing is saved before any member is known (a restart must not forget
        the members it remembers). A returned list counts as saved."""
        members = frozenset(alive)
        kept = self._saved & members
        if len(kept) >= min(KEEP, len(members)):
            return None
        if kept != self._saved and now - self._saved_at < SAVE_EVERY:
            return None  # saved members died: replaced, but not on every tick of churn
        newcomers = sorted(members - kept)
        chosen = sorted(
            kept | set(self.rng.sample(newcomers, min(KEEP - len(kept), len(newcomers))))
        )
        self._saved, self._saved_at = frozenset(chosen), now
        return chosen

    def save(self, members: list[str]) -> None:
        """Replace the saved members with `members`."""
        self.backend.put(KEY, json.dumps({"members": members}).encode())

    def load(self) -> list[str]:
        """The members last saved; none when there is no record or it cannot be read."""
        try:
            return _parse(self.backend.get(KEY))
        except NotFound:
            return []
        except ValueError as exc:
            print(
                f"known members {KEY}: {exc}; joining through the seeds alone",
                file=sys.stderr,
                flush=True,
            )
            return []


def _parse(data: bytes) -> list[str]:
    record = json.loads(data)  # a JSONDecodeError is a ValueError
    members = record.get("members") if isinstance(record, dict) else None
    if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
        raise ValueError('not {"members": ["host:port", ...]}')
    for member in members:
        try:
            parse_address(member, "member")
        except InvalidInput as exc:
            raise ValueError(str(exc)) from None
    return members
