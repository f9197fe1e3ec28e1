"""One attempt of a run: its rank processes and what their heartbeats have told us so far."""

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shipyard.train.faults import STACK_SIGNAL
from shipyard.train.heartbeat import Beat
from shipyard.train.ranks import RankProcess

NO_COLLECTIVE = (-1, -1)
STACK_WAIT_S = 0.3  # for faulthandler to write every rank's stacks


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
    anomaly: dict[str, Any] | None = None
    first_step_at: float | None = None
    training: bool = False  # rank 0 completed a step: every rank is past its restore

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

    def dump_stacks(self, run_dir: Path) -> dict[str, str]:
        """Every rank's Python stacks (all threads), as faulthandler wrote them on SIGUSR1."""
        for rank in self.ranks:
            rank.signal(STACK_SIGNAL)
        time.sleep(STACK_WAIT_S)
        stacks = {}
        for r in range(self.world_size):
            path = run_dir / "stacks" / f"attempt-{self.number}-rank-{r}.txt"
            stacks[str(r)] = path.read_text()[-6000:] if path.exists() else ""
        return stacks

    def anomaly_record(self, run_dir: Path) -> dict[str, Any] | None:
        """The NaN/spike report: from its beat, or the file rank 0 wrote (beats may be lost)."""
        path = run_dir / f"anomaly-attempt-{self.number}.json"
        if self.anomaly is None and path.exists():
            self.anomaly = json.loads(path.read_text())
        return self.anomaly

    def rank_times(self) -> dict[int, tuple[float, float]]:
        """Each rank's last (step time, forward CPU time)."""
        return {
            r: (float(b.fields.get("step_time", 0.0)), float(b.fields.get("work_time", 0.0)))
            for r, b in dict(self.last).items()
        }
