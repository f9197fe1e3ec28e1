"""One attempt of a run: its rank processes and what their heartbeats have told us so far."""

import time
from dataclasses import dataclass, field

from shipyard.train.heartbeat import Beat
from shipyard.train.ranks import RankProcess

NO_COLLECTIVE = (-1, -1)


@dataclass
class Attempt:
    number: int
    ranks: list[RankProcess]
    started_at: float = field(default_factory=time.time)
    ready: set[int] = field(default_factory=set)
    done: set[int] = field(default_factory=set)
    steps: dict[int, int] = field(default_factory=dict)
    entered: dict[int, tuple[int, int]] = field(default_factory=dict)
    peers: dict[int, str] = field(default_factory=dict)
    last: dict[int, Beat] = field(default_factory=dict)
    lost: dict[int, str] = field(default_factory=dict)  # ranks whose collective failed
    anomaly: dict[str, object] | None = None
    first_step_at: float | None = None

    @property
    def world_size(self) -> int:
        return len(self.ranks)

    def record(self, beat: Beat) -> None:
        self.last[beat.rank] = beat
        if beat.collective != NO_COLLECTIVE:
            self.entered[beat.rank] = max(
                self.entered.get(beat.rank, NO_COLLECTIVE), beat.collective
            )
        if beat.kind == "ready":
            self.ready.add(beat.rank)
            self.steps.setdefault(beat.rank, beat.step)
        elif beat.kind == "step":
            self.steps[beat.rank] = beat.step
            if beat.fields.get("peer"):
                self.peers[beat.rank] = str(beat.fields["peer"])
            if self.first_step_at is None:
                self.first_step_at = beat.at
        elif beat.kind == "done":
            self.done.add(beat.rank)
        elif beat.kind == "anomaly":
            self.anomaly = dict(beat.fields)
        elif beat.kind == "lost":
            self.lost[beat.rank] = str(beat.fields.get("error", ""))

    def global_step(self) -> int:
        """The slowest rank's completed steps (-1 until every rank has reported)."""
        if len(self.steps) < self.world_size:
            return -1
        return min(self.steps.values())

    def entered_all(self) -> dict[int, tuple[int, int]]:
        return {r: self.entered.get(r, NO_COLLECTIVE) for r in range(self.world_size)}

    def exit_codes(self) -> list[int | None]:
        return [rank.exit_code() for rank in self.ranks]

    def peer_list(self) -> list[str]:
        """Every rank's peer-memory address, or [] unless all are known."""
        if len(self.peers) < self.world_size:
            return []
        return [self.peers[r] for r in range(self.world_size)]

    def kill(self) -> None:
        for rank in self.ranks:
            rank.kill()
