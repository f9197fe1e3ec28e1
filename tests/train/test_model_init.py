"""The trainer's GPT starts where an untrained model should, and the loss honours a mask."""

import math

import pytest
import torch

from shipyard.train.config import ModelConfig
from shipyard.train.model import GPT, next_token_loss, shifted_loss


@pytest.mark.parametrize("vocab", [64, 512, 4096])
@pytest.mark.parametrize(("width", "layers"), [(32, 1), (128, 4)])
def test_step_zero_loss_is_near_ln_vocab(vocab: int, width: int, layers: int) -> None:
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=vocab, d_model=width, n_layers=layers, n_heads=4, seq_len=32)
    model = GPT(cfg)
    tokens = torch.randint(0, vocab, (8, 33))
    with torch.no_grad():
        loss = float(next_token_loss(model, tokens))
    assert abs(loss / math.log(vocab) - 1) < 0.05


def test_masked_loss_averages_only_the_targets() -> None:
    torch.manual_seed(1)
    logits = torch.randn(2, 5, 7)
    tokens = torch.randint(0, 7, (2, 6))
    mask = torch.tensor([[1, 0, 1, 1, 0, 0], [0, 0, 0, 1, 1, 1]], dtype=torch.bool)
    each = torch.nn.functional.cross_entropy(
        logits.reshape(-1, 7), tokens[:, 1:].reshape(-1), reduction="none"
    ).reshape(2, 5)
    chosen = mask[:, 1:]  # the mask marks targets: the token predicted, not the one read
    assert torch.allclose(shifted_loss(logits, tokens, mask), each[chosen].mean())
    assert torch.equal(shifted_loss(logits, tokens, torch.ones_like(mask)), each.mean())
    nothing = shifted_loss(logits, tokens, torch.zeros_like(mask))
    assert float(nothing) == 0.0
