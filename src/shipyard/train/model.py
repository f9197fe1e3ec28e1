"""A small GPT-style decoder: token + position embeddings, pre-norm causal blocks, tied head.

Initialised as GPT-2 is: N(0, 0.02) embeddings and linear weights, the projections that add into
the residual stream scaled down by sqrt(2 × layers) so its variance does not grow with depth, zero
biases. The logits then start near zero and the step-0 loss near ln(vocab_size).
"""

import math

import torch
from torch import nn
from torch.nn import functional

from shipyard.train.config import ModelConfig

INIT_STD = 0.02


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.norm1 = nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.norm2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, 4 * cfg.d_model),
            nn.GELU(),
            nn.Linear(4 * cfg.d_model, cfg.d_model),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(width, dim=2)
        heads = [t.view(batch, length, self.n_heads, -1).transpose(1, 2) for t in (q, k, v)]
        q, k, v = heads
        attended = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, length, width))
        out: torch.Tensor = x + self.mlp(self.norm2(x))
        return out


class GPT(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.position = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = nn.LayerNorm(cfg.d_model)
        residual = INIT_STD / math.sqrt(2 * cfg.n_layers)
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear):
                std = residual if name.endswith(("proj", "mlp.2")) else INIT_STD
                nn.init.normal_(module.weight, std=std)
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, std=INIT_STD)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits (batch, length, vocab) for `tokens` (batch, length)."""
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.embed(tokens) + self.position(positions)
        for block in self.blocks:
            x = block(x)
        logits: torch.Tensor = self.norm(x) @ self.embed.weight.T
        return logits


def next_token_loss(
    model: nn.Module, tokens: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Mean cross-entropy of predicting each token from the ones before it (only the tokens
    that `mask` marks as targets, when given)."""
    return shifted_loss(model(tokens[:, :-1]), tokens, mask)


def shifted_loss(
    logits: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """The loss of `logits` (batch, length - 1, vocab), read from `tokens[:, :-1]`, against the
    next tokens: the mean over every target, or over those `mask` (batch, length) marks.

    A part of a batch with no target at all has loss 0 (and no gradient), not NaN."""
    flat = logits.reshape(-1, logits.shape[-1])
    targets = tokens[:, 1:].reshape(-1)
    if mask is None:
        return functional.cross_entropy(flat, targets)
    weights = mask[:, 1:].reshape(-1).to(flat.dtype)
    losses = functional.cross_entropy(flat, targets, reduction="none")
    return (losses * weights).sum() / weights.sum().clamp(min=1.0)
