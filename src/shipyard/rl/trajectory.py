"""A trajectory: one sampled completion, with the policy version and rollout log-prob per token."""

from dataclasses import asdict, dataclass, field
from typing import Any

from shipyard.rl.tasks import Problem, decode

GENERATING, SCORING, SCORED, QUARANTINED = "generating", "scoring", "scored", "quarantined"


@dataclass
class Trajectory:
    uid: str
    group: int
    problem: Problem
    prompt: list[int]
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)  # the policy version of each token
    segments: int = 0  # dispatches that added tokens: > 1 is a partial rollout continued
    finished: bool = False
    status: str = GENERATING
    reward: float | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def extend(self, tokens: list[int], logprobs: list[float], version: int, done: bool) -> None:
        self.tokens += tokens
        self.logprobs += logprobs
        self.versions += [version] * len(tokens)
        self.segments += 1
        self.finished = done

    @property
    def completion(self) -> str:
        return decode(self.tokens)

    def staleness(self, trainer_version: int) -> int:
        """How many updates the trainer is past the oldest policy that wrote a token."""
        return trainer_version - min(self.versions, default=trainer_version)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> "Trajectory":
        return cls(**{**raw, "problem": Problem(**raw["problem"])})
