"""The policy: the project's small GPT, batched sampling with log-probs, and its weights on disk.

Sampling decodes a batch of (prompt + tokens so far) rows together for at most `budget` steps;
rows that reach end-of-sequence or `max_new` stop, the others come back unfinished (a partial
rollout) and continue at the next call, possibly under newer weights.
"""

import time
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch.nn import functional

from shipyard.rl.tasks import BOS, EOS, PAD
from shipyard.train.config import ModelConfig
from shipyard.train.model import GPT


def build(cfg: ModelConfig, seed: int) -> GPT:
    torch.manual_seed(seed)
    return GPT(cfg)


def save_weights(model: GPT, path: Path) -> None:
    """Atomically: a reader never sees a half-written file."""
    temp = path.with_name(f".{path.name}.tmp")
    save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()}, str(temp))
    temp.replace(path)


def load_weights(model: GPT, path: Path) -> None:
    model.load_state_dict(load_file(str(path)))


def pack(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded (batch, length) tokens and their lengths."""
    width = max(len(r) for r in rows)
    tokens = torch.full((len(rows), width), PAD, dtype=torch.long)
    for i, row in enumerate(rows):
        tokens[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return tokens, torch.tensor([len(r) for r in rows])


def token_logprobs(model: GPT, rows: list[list[int]], starts: list[int]) -> list[torch.Tensor]:
    """Log-probs of each row's tokens from index `starts[i]` on, each given those before it."""
    tokens, _ = pack(rows)
    logp = functional.log_softmax(model(tokens[:, :-1]).float(), dim=-1)
    picked = logp.gather(2, tokens[:, 1:].unsqueeze(2)).squeeze(2)
    return [picked[i, starts[i] - 1 : len(row) - 1] for i, row in enumerate(rows)]


@dataclass
class Step:
    """What one call added to one row."""

    tokens: list[int]
    logprobs: list[float]
    finished: bool


@torch.no_grad()
def sample(
    model: GPT,
    rows: list[list[int]],
    generated: list[int],
    *,
    max_new: int,
    budget: int,
    temperature: float,
    generator: torch.Generator,
    step_latency_s: float = 0.0,
    greedy: bool = False,
) -> list[Step]:
    """Continue each row (BOS + prompt + tokens so far; `generated[i]` of them already sampled)."""
    live = list(range(len(rows)))
    rows = [list(r) for r in rows]
    out = [Step([], [], False) for _ in rows]
    seq_len = model.position.num_embeddings
    for _ in range(budget):
        if not live:
            break
        if step_latency_s:
            time.sleep(step_latency_s)
        tokens, lengths = pack([rows[i] for i in live])
        logits = model(tokens[:, -seq_len:] if tokens.shape[1] > seq_len else tokens)
        last = logits[torch.arange(len(live)), lengths.clamp(max=seq_len) - 1].float()
        logp = functional.log_softmax(last / (1.0 if greedy else temperature), dim=-1)
        choice = (
            logp.argmax(-1)
            if greedy
            else torch.multinomial(logp.exp(), 1, generator=generator).squeeze(1)
        )
        # The engine's log-prob is of the sampling distribution at temperature 1: what the
        # trainer recomputes, so their difference measures staleness and numeric drift only.
        base = functional.log_softmax(last, dim=-1)
        still = []
        for j, i in enumerate(live):
            token = int(choice[j])
            out[i].tokens.append(token)
            out[i].logprobs.append(float(base[j, token]))
            rows[i].append(token)
            done = token == EOS or generated[i] + len(out[i].tokens) >= max_new
            done = done or len(rows[i]) >= seq_len
            out[i].finished = done
            if not done:
                still.append(i)
        live = still
    return out


def prompt_row(prompt_tokens: list[int]) -> list[int]:
    return [BOS, *prompt_tokens]
