"""Choosing the next token from one row's logits: greedy, or seeded temperature/top-p sampling."""

import torch

from shipyard.serve.engine.request import Sampling, Token


def generator_for(sampling: Sampling) -> torch.Generator | None:
    """A private generator per request, so a seed gives the same tokens whatever else runs."""
    if sampling.temperature == 0:
        return None
    gen = torch.Generator()
    if sampling.seed is None:
        gen.seed()
    else:
        gen.manual_seed(sampling.seed)
    return gen


def pick(logits: torch.Tensor, sampling: Sampling, gen: torch.Generator | None) -> Token:
    """The next token from a [vocab] row of logits, with its logprob when asked for."""
    logits = logits.float()
    if sampling.temperature == 0 or gen is None:
        token = int(torch.argmax(logits))
    else:
        probs = torch.softmax(logits / sampling.temperature, dim=-1)
        if sampling.top_p < 1.0:
            sorted_probs, order = torch.sort(probs, descending=True)
            beyond = torch.cumsum(sorted_probs, dim=-1) - sorted_probs > sampling.top_p
            sorted_probs[beyond] = 0.0
            probs = torch.zeros_like(probs).scatter(0, order, sorted_probs)
        token = int(torch.multinomial(probs, 1, generator=gen))
    if sampling.top_logprobs is None:
        return Token(token, None)
    logprobs = torch.log_softmax(logits, dim=-1)
    top: tuple[tuple[int, float], ...] = ()
    if sampling.top_logprobs > 0:
        values, indices = torch.topk(logprobs, sampling.top_logprobs)
        top = tuple((int(i), float(v)) for i, v in zip(indices, values, strict=True))
    return Token(token, float(logprobs[token]), top)
