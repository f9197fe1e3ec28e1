"""The trajectory buffer: every admitted group, its in-flight and finished trajectories.

It is the one owner of rollout state: a worker holds nothing between dispatches, so a worker that
dies loses only the dispatch it was running, whose trajectories are handed out again from what
the buffer already accepted. Each dispatch has an id and a trajectory accepts a segment only
from the dispatch it is assigned to: a result never lands twice.
"""

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from shipyard.rl.tasks import Problem, encode
from shipyard.rl.trajectory import GENERATING, QUARANTINED, SCORED, SCORING, Trajectory


@dataclass
class Batch:
    groups: list[list[Trajectory]]
    dropped_stale: int  # groups older than eta, never trained on
    staleness: Counter[int]
    dropped_unscored: int = 0  # groups with fewer than two scored members: no advantage


@dataclass
class Buffer:
    group_size: int
    groups: dict[int, list[Trajectory]] = field(default_factory=dict)
    admitted: int = 0  # groups ever admitted, minus those dropped as stale
    next_group: int = 0
    assigned: dict[str, int] = field(default_factory=dict)  # uid -> dispatch id
    consumed: list[str] = field(default_factory=list)  # uids trained on, in order
    quarantine: list[Trajectory] = field(default_factory=list)  # reward errors, kept aside
    dropped: list[str] = field(default_factory=list)  # uids of scored members of dropped groups

    def admit(self, problem: Problem) -> list[Trajectory]:
        index = self.next_group
        self.next_group += 1
        self.admitted += 1
        prompt = encode(problem.prompt)
        group = [
            Trajectory(f"g{index}-{k}", index, problem, prompt) for k in range(self.group_size)
        ]
        self.groups[index] = group
        return group

    def trajectories(self) -> list[Trajectory]:
        return [t for group in self.groups.values() for t in group]

    def unassigned(self, limit: int) -> list[Trajectory]:
        """Unfinished trajectories no dispatch holds, oldest group first."""
        out = []
        for group in sorted(self.groups):
            for traj in self.groups[group]:
                if traj.status == GENERATING and traj.uid not in self.assigned:
                    out.append(traj)
                    if len(out) == limit:
                        return out
        return out

    def assign(self, trajs: list[Trajectory], dispatch: int) -> None:
        for traj in trajs:
            self.assigned[traj.uid] = dispatch

    def release(self, dispatch: int) -> int:
        """A dispatch that will never answer (its worker died): its trajectories go back."""
        gone = [uid for uid, d in self.assigned.items() if d == dispatch]
        for uid in gone:
            del self.assigned[uid]
        return len(gone)

    def accept(
        self,
        dispatch: int,
        uid: str,
        tokens: list[int],
        logprobs: list[float],
        version: int,
        done: bool,
    ) -> Trajectory | None:
        """Apply one segment if `dispatch` still holds `uid`; None for a stale or repeated one."""
        if self.assigned.get(uid) != dispatch:
            return None
        del self.assigned[uid]
        traj = self.find(uid)
        if traj is None or traj.status != GENERATING:
            return None
        traj.extend(tokens, logprobs, version, done)
        if done:
            traj.status = SCORING
        return traj

    def find(self, uid: str) -> Trajectory | None:
        group = self.groups.get(int(uid[1:].split("-")[0]))
        return next((t for t in group or [] if t.uid == uid), None)

    def take(self, version: int, eta: int, count: int) -> Batch:
        """Up to `count` complete groups, oldest first, each with its scored members only (the
        quarantined go to `quarantine`); a group staler than `eta`, or with fewer than two
        scored members (no advantage to compute), is dropped and its admission slot freed."""
        batch = Batch([], 0, Counter())
        for index in sorted(self.groups):
            group = self.groups[index]
            if not all(t.status in (SCORED, QUARANTINED) for t in group):
                continue
            stale = max(t.staleness(version) for t in group)
            del self.groups[index]
            self.quarantine += [t for t in group if t.status == QUARANTINED]
            group = [t for t in group if t.status == SCORED]
            if stale > eta or len(group) < 2:
                batch.dropped_stale += stale > eta
                batch.dropped_unscored += stale <= eta
                self.dropped += [t.uid for t in group]
                self.admitted -= 1  # its slot is admitted again with fresh weights
                continue
            batch.groups.append(group)
            batch.staleness.update(t.staleness(version) for t in group)
            self.consumed += [t.uid for t in group]
            if len(batch.groups) == count:
                break
        return batch

    def complete_groups(self) -> int:
        return sum(
            all(t.status in (SCORED, QUARANTINED) for t in group) for group in self.groups.values()
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "group_size": self.group_size,
            "admitted": self.admitted,
            "next_group": self.next_group,
            "consumed": self.consumed,
            "trajectories": [t.to_json() for t in self.trajectories()],
            "quarantine": [t.to_json() for t in self.quarantine],
            "dropped": self.dropped,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> "Buffer":
        """Restored with no dispatch outstanding: whatever was in flight is handed out again."""
        buffer = cls(raw["group_size"], admitted=raw["admitted"], next_group=raw["next_group"])
        buffer.consumed = list(raw["consumed"])
        buffer.quarantine = [Trajectory.from_json(t) for t in raw["quarantine"]]
        buffer.dropped = list(raw["dropped"])
        for item in raw["trajectories"]:
            traj = Trajectory.from_json(item)
            buffer.groups.setdefault(traj.group, []).append(traj)
        return buffer
