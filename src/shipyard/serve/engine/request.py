"""The requests the engine runs, and the events it sends back to their callers.

A `GenRequest` generates: its caller reads `events` until a `Done` or a `Failed`. A
`ScoreRequest` scores a continuation after a context: its one event is a `LogLikelihood` or a
`Failed`. The engine thread is the only writer of the engine-side fields.
"""

import itertools
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Literal

Tier = Literal["interactive", "standard", "batch"]
TIERS: tuple[Tier, ...] = ("interactive", "standard", "batch")
_ids = itertools.count(1)


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    seed: int | None = None
    top_logprobs: int | None = None  # None: no logprobs; n: the chosen token's and n alternatives


@dataclass(frozen=True)
class Token:
    token_id: int
    logprob: float | None
    top: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class Done:
    reason: Literal["stop", "length"]
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int  # prompt tokens whose KV came from the prefix cache


@dataclass(frozen=True)
class Failed:
    status: int  # the HTTP status the caller should answer with, if nothing was sent yet
    message: str
    retry_after: float | None = None


@dataclass(frozen=True)
class LogLikelihood:
    logprob: float  # the sum over the continuation's tokens
    greedy: bool  # every continuation token was the argmax after what precedes it


Event = Token | Done | Failed | LogLikelihood


@dataclass(eq=False)
class GenRequest:
    prompt_ids: list[int]
    max_tokens: int
    sampling: Sampling = field(default_factory=Sampling)
    tier: Tier = "standard"
    adapter: str | None = None
    stop_ids: frozenset[int] = frozenset()
    id: int = field(default_factory=lambda: next(_ids))
    submitted: float = field(default_factory=time.monotonic)
    events: "queue.Queue[Event]" = field(default_factory=queue.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)

    def footprint_tokens(self) -> int:
        """Tokens of KV this request may hold at its end: what admission reserves."""
        return len(self.prompt_ids) + self.max_tokens

    def cancel(self) -> None:
        """The caller went away: the engine drops the request at its next step."""
        self.cancelled.set()


@dataclass(eq=False)
class ScoreRequest:
    """log P(continuation | context); the context's KV goes through the prefix cache, so the
    choices of one multiple-choice item share it."""

    context_ids: list[int]  # at least one token
    continuation_ids: list[int]  # at least one token
    tier: Tier = "standard"
    adapter: str | None = None
    id: int = field(default_factory=lambda: next(_ids))
    submitted: float = field(default_factory=time.monotonic)
    events: "queue.Queue[Event]" = field(default_factory=queue.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)

    def footprint_tokens(self) -> int:
        return len(self.context_ids) + len(self.continuation_ids)

    def cancel(self) -> None:
        self.cancelled.set()


Request = GenRequest | ScoreRequest
