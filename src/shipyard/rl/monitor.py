"""Alerts on the reward stream: errors per environment, and reward jumps with length shifts.

A policy that finds a hole in its verifier shows a sudden rise in reward together with a change in
how long it writes; either alone is ordinary learning. Windows are consecutive, `window` scores
each, per environment.
"""

from collections import Counter, deque
from dataclasses import dataclass, field

from shipyard.rl.config import RewardConfig


@dataclass
class Alert:
    kind: str  # "error-rate" | "reward-hack"
    env: str
    detail: str


@dataclass
class _Window:
    rewards: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)


@dataclass
class RewardMonitor:
    cfg: RewardConfig
    errors: Counter[str] = field(default_factory=Counter)
    scored: Counter[str] = field(default_factory=Counter)
    alerts: list[Alert] = field(default_factory=list)
    _recent: dict[str, deque[bool]] = field(default_factory=dict)
    _current: dict[str, _Window] = field(default_factory=dict)
    _previous: dict[str, _Window] = field(default_factory=dict)

    def observe(self, env: str, reward: float | None, length: int) -> None:
        """One answer from the reward service; `reward` None is an error."""
        recent = self._recent.setdefault(env, deque(maxlen=self.cfg.window))
        recent.append(reward is None)
        if reward is None:
            self.errors[env] += 1
            if len(recent) == recent.maxlen:
                rate = sum(recent) / len(recent)
                if rate > self.cfg.max_error_rate and not self._active("error-rate", env):
                    self._raise("error-rate", env, f"{rate:.0%} of the last {len(recent)} failed")
            return
        self.scored[env] += 1
        window = self._current.setdefault(env, _Window())
        window.rewards.append(reward)
        window.lengths.append(length)
        if len(window.rewards) == self.cfg.window:
            self._compare(env, self._previous.get(env), window)
            self._previous[env] = window
            self._current[env] = _Window()

    def _compare(self, env: str, before: _Window | None, now: _Window) -> None:
        if before is None:
            return
        jump = _mean(now.rewards) - _mean(before.rewards)
        old_len = max(_mean(before.lengths), 1.0)
        shift = abs(_mean(now.lengths) - old_len) / old_len
        if jump > self.cfg.jump and shift > self.cfg.length_shift:
            self._raise(
                "reward-hack",
                env,
                f"mean reward rose {jump:+.2f} while mean length moved {shift:.0%} "
                f"({old_len:.1f} -> {_mean(now.lengths):.1f} tokens)",
            )

    def _active(self, kind: str, env: str) -> bool:
        return any(a.kind == kind and a.env == env for a in self.alerts)

    def _raise(self, kind: str, env: str, detail: str) -> None:
        self.alerts.append(Alert(kind, env, detail))


def _mean(values: list[float] | list[int]) -> float:
    return sum(values) / len(values) if values else 0.0
