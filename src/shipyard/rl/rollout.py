"""Rollouts through the serving engine: the one generation path of RL.

A row (BOS, prompt, tokens sampled so far) is just a prompt to the engine: each call continues
every row by at most `budget` tokens as one engine request, sampled at the rollout temperature
and top-p with the request's own seed, and records the engine's log-prob of each sampled token.
A row that reaches end-of-sequence, `max_new` tokens or the model's context is finished; the
others come back unfinished (a partial rollout) and continue at a later call, possibly under
newer weights.

It submits `GenRequest`s to the `Engine` itself rather than through `LocalEngine.generate`,
which takes one sampling and one token limit for all its prompts: the members of a group share
their prompt and need seeds of their own, and each row has its own room left.
"""

import hashlib
from dataclasses import dataclass

import torch

from shipyard.rl.tasks import EOS
from shipyard.serve.engine import (
    Done,
    Engine,
    EngineConfig,
    EngineFailed,
    Failed,
    GenRequest,
    Sampling,
    Token,
)


@dataclass
class Step:
    """What one call added to one row."""

    tokens: list[int]
    logprobs: list[float]
    finished: bool


def engine(model: torch.nn.Module, rows: int) -> Engine:
    """A started engine over `model` that runs up to `rows` rows at once.

    No prefix cache: the weights change between calls, and a cached prefix would hold the keys
    and values of an older version. While no request is in flight the model's weights may be
    replaced in place (`load_state_dict`): the engine keeps no state of them between requests.
    """
    config = EngineConfig(max_batch=rows, prefix_cache_bytes=0, max_queue=max(rows, 1))
    return Engine(model, config).start()


def segment_seed(run_seed: int, key: str, generated: int) -> int:
    """The seed of one row's segment: a function of the run, the row and its length only, so a
    trajectory's tokens do not depend on which worker or batch continued it."""
    digest = hashlib.blake2b(f"{run_seed}:{key}:{generated}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1  # torch seeds are below 2**63


def continue_rows(
    runner: Engine,
    rows: list[list[int]],
    generated: list[int],
    seeds: list[int],
    *,
    max_new: int,
    budget: int,
    temperature: float,
    top_p: float = 1.0,
) -> list[Step]:
    """Continue each row (`generated[i]` of its tokens already sampled) through `runner`."""
    context = runner.context
    requests = []
    for row, done, seed in zip(rows, generated, seeds, strict=True):
        room = min(budget, max_new - done, context - len(row))
        if room < 1:
            raise ValueError(f"a row of {len(row)} tokens ({done} generated) has nothing to add")
        sampling = Sampling(temperature=temperature, top_p=top_p, seed=seed, top_logprobs=0)
        requests.append(GenRequest(row, room, sampling, stop_ids=frozenset({EOS})))
    for request in requests:  # all queued before any is read: the engine batches them
        runner.submit(request)
    out = []
    for row, done, request in zip(rows, generated, requests, strict=True):
        step = Step([], [], False)
        while True:
            event = request.events.get()
            if isinstance(event, Failed):
                raise EngineFailed(f"rollout failed ({event.status}): {event.message}")
            if isinstance(event, Done):
                break
            assert isinstance(event, Token) and event.logprob is not None  # top_logprobs=0
            step.tokens.append(event.token_id)
            step.logprobs.append(event.logprob)
        total = len(row) + len(step.tokens)
        step.finished = EOS in step.tokens or done + len(step.tokens) >= max_new or total >= context
        out.append(step)
    return out
