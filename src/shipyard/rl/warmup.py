"""The supervised warm-up that makes rewards start above zero, and held-out evaluation."""

import random

import torch
from torch.nn import functional

from shipyard.rl import verifiers
from shipyard.rl.config import RLConfig
from shipyard.rl.policy import logits, pack, prompt_row
from shipyard.rl.rollout import continue_rows, engine, segment_seed
from shipyard.rl.tasks import EOS, PAD, arith_problem, decode, encode, target, think_length


def warmup(model: torch.nn.Module, cfg: RLConfig) -> list[float]:
    """`cfg.warmup.steps` steps of next-token loss on the completions only; the losses."""
    rng = random.Random(cfg.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.warmup.lr)
    losses = []
    model.train()
    for step in range(cfg.warmup.steps):
        rows, masks = [], []
        for k in range(cfg.warmup.batch):
            problem = arith_problem(cfg.task, 1_000_000 + step * cfg.warmup.batch + k)
            prompt = prompt_row(encode(problem.prompt))
            completion = [*encode(target(problem, think_length(cfg.task, rng))), EOS]
            rows.append(prompt + completion)
            masks.append([0] * len(prompt) + [1] * len(completion))
        tokens, _ = pack(rows)
        mask, _ = pack(masks)
        out = logits(model, tokens[:, :-1])
        loss_each = functional.cross_entropy(
            out.reshape(-1, out.shape[-1]), tokens[:, 1:].reshape(-1), reduction="none"
        )
        weight = (mask[:, 1:].reshape(-1) == 1).float() * (tokens[:, 1:].reshape(-1) != PAD).float()
        loss = (loss_each * weight).sum() / weight.sum()
        optimizer.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        losses.append(float(loss.detach()))
    model.eval()
    return losses


def heldout_accuracy(model: torch.nn.Module, cfg: RLConfig, samples: int = 4) -> float:
    """Share of answers to held-out problems that the verifier scores 1, `samples` per problem
    sampled by the serving engine at the rollout temperature and top-p with fixed seeds (pass@1:
    greedy decoding never leaves a long-tailed thinking run)."""
    model.eval()
    problems = [arith_problem(cfg.task, i, heldout=True) for i in range(cfg.task.heldout)]
    problems = [p for p in problems for _ in range(samples)]
    rows = [prompt_row(encode(p.prompt)) for p in problems]
    runner = engine(model, min(len(rows), 64))
    try:
        steps = []
        for first in range(0, len(rows), 64):  # the engine's queue holds one wave at a time
            part = rows[first : first + 64]
            steps += continue_rows(
                runner,
                part,
                [0] * len(part),
                [segment_seed(cfg.seed, f"heldout-{first + k}", 0) for k in range(len(part))],
                max_new=cfg.rollout.max_new_tokens,
                budget=cfg.rollout.max_new_tokens,
                temperature=cfg.rollout.temperature,
                top_p=cfg.rollout.top_p,
            )
    finally:
        runner.stop()
    right = 0
    for problem, step in zip(problems, steps, strict=True):
        reward, _ = verifiers.score("arith", decode(step.tokens), problem.entry)
        right += reward == 1.0
    return right / len(problems)
