"""GRPO: group-relative advantages, no critic, a PPO-style clipped objective with truncated
importance correction for the gap between the rollout engine and the trainer.

For each token, with μ the rollout log-prob (the engine, possibly stale), π_old the trainer's
log-prob before this update and π the one being optimised:

    w = min(exp(π_old - μ), is_cap)                       (truncated importance weight)
    loss = -w · min(r·A, clip(r, 1 - ε, 1 + ε)·A),  r = exp(π - π_old)

A is the trajectory's reward minus its group's mean, over the group's standard deviation.
Quarantined trajectories take no part: they have no reward.
"""

from dataclasses import dataclass, field

import torch

from shipyard.rl.config import TrainerConfig
from shipyard.rl.policy import prompt_row, token_logprobs
from shipyard.rl.trajectory import SCORED, Trajectory


@dataclass
class StepStats:
    trajectories: int = 0
    tokens: int = 0
    reward_mean: float = 0.0
    length_mean: float = 0.0
    groups_without_signal: int = 0  # every member scored the same: no advantage
    clip_fraction: float = 0.0
    is_ratio: list[float] = field(default_factory=list)  # exp(π_old - μ), untruncated, per token
    logp_diff: list[float] = field(default_factory=list)  # π_old - μ per token


def advantages(groups: list[list[Trajectory]]) -> list[tuple[Trajectory, float]]:
    out = []
    for group in groups:
        scored = [t for t in group if t.status == SCORED and t.tokens]
        if len(scored) < 2:
            continue
        rewards = torch.tensor([float(t.reward or 0.0) for t in scored])
        std = float(rewards.std())
        centred = (rewards - rewards.mean()) / (std + 1e-6)
        out += [(t, float(a)) for t, a in zip(scored, centred, strict=True)]
    return out


def train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    groups: list[list[Trajectory]],
    cfg: TrainerConfig,
) -> StepStats:
    stats = StepStats()
    items = advantages(groups)
    stats.groups_without_signal = sum(
        1 for g in groups if len({t.reward for t in g if t.status == SCORED}) <= 1
    )
    if not items:
        return stats
    rows = [prompt_row(t.prompt) + t.tokens for t, _ in items]
    starts = [len(t.prompt) + 1 for t, _ in items]
    model.train()
    with torch.no_grad():
        old = token_logprobs(model, rows, starts)
    behaviour = [torch.tensor(t.logprobs) for t, _ in items]
    for o, mu in zip(old, behaviour, strict=True):
        diff = o - mu
        stats.logp_diff += diff.tolist()
        stats.is_ratio += diff.exp().tolist()
    stats.trajectories = len(items)
    stats.tokens = sum(len(t.tokens) for t, _ in items)
    stats.reward_mean = sum(float(t.reward or 0.0) for t, _ in items) / len(items)
    stats.length_mean = stats.tokens / len(items)
    clipped = 0
    order = list(range(len(items)))
    size = max(1, -(-len(order) // cfg.minibatches))
    for first in range(0, len(order), size):
        chosen = order[first : first + size]
        new = token_logprobs(model, [rows[i] for i in chosen], [starts[i] for i in chosen])
        losses = []
        for k, i in enumerate(chosen):
            advantage = items[i][1]
            weight = (old[i] - behaviour[i]).exp().clamp(max=cfg.is_cap)
            ratio = (new[k] - old[i]).exp()
            clipped_ratio = ratio.clamp(1 - cfg.clip_eps, 1 + cfg.clip_eps)
            surrogate = torch.minimum(ratio * advantage, clipped_ratio * advantage)
            losses.append(-(weight * surrogate).sum())
            clipped += int((ratio != clipped_ratio).sum())
        loss = torch.stack(losses).sum() / max(1, sum(len(behaviour[i]) for i in chosen))
        optimizer.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    stats.clip_fraction = clipped / max(1, stats.tokens)
    model.eval()
    return stats
