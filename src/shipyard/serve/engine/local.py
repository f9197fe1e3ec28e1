"""The engine in process, for batch callers (evals, RL, data generation): submit and wait.

`LocalEngine` owns an `Engine` thread over one loaded model. `generate` and `loglikelihoods`
submit their requests (at most `max_queue` waiting at once) and block until every one is
answered; results come back in the order asked. Prompts as text are encoded as the replica
encodes them, so a seeded request gives the same tokens here and through a replica's API.
"""

import queue
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from shipyard.errors import InvalidInput, ShipyardError
from shipyard.serve.engine.core import Engine, EngineConfig
from shipyard.serve.engine.load import Loaded, load_causal_lm
from shipyard.serve.engine.request import (
    Done,
    Event,
    Failed,
    GenRequest,
    LogLikelihood,
    Request,
    Sampling,
    ScoreRequest,
    Token,
)
from shipyard.serve.engine.text import TextStream
from shipyard.serve.engine.tiers import Overloaded, TooLarge

GREEDY = Sampling()


class EngineFailed(ShipyardError):
    """The engine answered a request with an error (it said why)."""


@dataclass(frozen=True)
class Completion:
    text: str  # special tokens skipped, cut before the first stop string
    token_ids: list[int]  # every token generated, a final end-of-sequence token included
    logprobs: list[float] | None  # each token's, when sampling.top_logprobs is not None
    finish_reason: Literal["stop", "length"]


class LocalEngine:
    def __init__(self, model: Path | Loaded, config: EngineConfig | None = None) -> None:
        self.loaded = model if isinstance(model, Loaded) else load_causal_lm(model)
        self.tokenizer = self.loaded.tokenizer
        self.engine = Engine(self.loaded.model, config).start()
        self.context = self.engine.context
        eos = self.tokenizer.eos_token_id
        self.eot = int(eos if eos is not None else 0)

    def close(self) -> None:
        self.engine.stop()

    def __enter__(self) -> "LocalEngine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Prompts and pairs as token ids

    def prompt_ids(self, prompt: str, chat: bool = False) -> list[int]:
        """`prompt` as the replica encodes a completion's prompt, or (`chat`) one user turn of a
        chat through the model's chat template."""
        if not chat:
            return list(self.tokenizer(prompt)["input_ids"])
        if not getattr(self.tokenizer, "chat_template", None):
            raise InvalidInput("a chat prompt was asked for but the model has no chat template")
        turn = [{"role": "user", "content": prompt}]
        text = self.tokenizer.apply_chat_template(turn, tokenize=False, add_generation_prompt=True)
        return list(self.tokenizer(str(text), add_special_tokens=False)["input_ids"])

    def encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """lm-evaluation-harness's encoding: trailing context spaces move to the continuation,
        the pair is encoded whole and split at the context's length, an empty context is the
        end-of-text token."""
        spaces = len(context) - len(context.rstrip())
        if spaces:
            context, continuation = context[:-spaces], context[-spaces:] + continuation
        if not context:
            return [self.eot], list(self.tokenizer.encode(continuation))
        whole = list(self.tokenizer.encode(context + continuation))
        context_ids = list(self.tokenizer.encode(context))
        return whole[: len(context_ids)], whole[len(context_ids) :]

    # Batch calls

    def generate(
        self,
        prompts: Sequence[str] | Sequence[list[int]],
        sampling: Sampling = GREEDY,
        max_tokens: int = 256,
        stop: Sequence[str] = (),
        chat: bool = False,
    ) -> list[Completion]:
        """One completion per prompt (text, encoded as the replica does, or token ids)."""
        ids = [p if isinstance(p, list) else self.prompt_ids(p, chat) for p in prompts]
        stop_ids = self.loaded.stop_ids
        requests = [GenRequest(i, max_tokens, sampling, stop_ids=stop_ids) for i in ids]
        streams = [_Stream(TextStream(self.tokenizer, tuple(stop))) for _ in requests]

        def on_event(index: int, event: Event) -> bool:
            return streams[index].take(requests[index], event)

        self._run(requests, on_event)
        return [s.completion() for s in streams]

    def loglikelihoods(
        self, pairs: Sequence[tuple[str, str]] | Sequence[tuple[list[int], list[int]]]
    ) -> list[LogLikelihood]:
        """log P(continuation | context) per pair, in order. Text pairs are encoded as the
        harness encodes them; a context too long for the model loses its oldest tokens."""
        requests = []
        for context, continuation in pairs:
            if isinstance(context, str) or isinstance(continuation, str):
                context_ids, continuation_ids = self.encode_pair(str(context), str(continuation))
            else:
                context_ids, continuation_ids = list(context), list(continuation)
            if not continuation_ids:
                raise InvalidInput("a continuation to score encodes to no tokens")
            keep = self.context + 1 - len(continuation_ids)
            requests.append(ScoreRequest(context_ids[-keep:] if keep > 0 else [], continuation_ids))
        scores: dict[int, LogLikelihood] = {}

        def on_event(index: int, event: Event) -> bool:
            if isinstance(event, Failed):
                raise EngineFailed(f"scoring pair {index}: {event.message}")
            assert isinstance(event, LogLikelihood)
            scores[index] = event
            return True

        self._run(requests, on_event)
        return [scores[i] for i in range(len(requests))]

    def _run(self, requests: Sequence[Request], on_event: Any) -> None:
        """Submit `requests`, at most a queue's worth waiting at once, and feed their events to
        `on_event(index, event)` (True: that request is finished) until all are."""
        sink: queue.Queue[tuple[int, Event]] = queue.Queue()
        window = self.engine.config.max_queue
        submitted = finished = 0
        try:
            while finished < len(requests):
                while submitted < len(requests) and submitted - finished < window:
                    request = requests[submitted]
                    request.events = _Tagged(sink, submitted)
                    try:
                        self.engine.submit(request)
                    except Overloaded:
                        break  # room comes back as ours finish
                    except TooLarge as exc:
                        raise InvalidInput(f"request {submitted}: {exc}") from None
                    submitted += 1
                try:  # with none of ours in flight, look again for room soon
                    index, event = sink.get(timeout=0.05 if submitted == finished else None)
                except queue.Empty:
                    continue
                if on_event(index, event):
                    finished += 1
        finally:
            for request in requests[:submitted]:
                request.cancel()  # a no-op for the finished; frees the rest if we raised


class _Tagged(queue.Queue[Event]):
    """A request's event queue that forwards each event, tagged, to one shared queue."""

    def __init__(self, sink: "queue.Queue[tuple[int, Event]]", tag: int) -> None:
        super().__init__()
        self._sink, self._tag = sink, tag

    def put(self, item: Event, block: bool = True, timeout: float | None = None) -> None:
        self._sink.put((self._tag, item))


class _Stream:
    """One generation's tokens, text and end; it cancels its request at a stop string."""

    def __init__(self, text: TextStream) -> None:
        self.text = text
        self.parts: list[str] = []
        self.ids: list[int] = []
        self.logprobs: list[float] = []
        self.reason: Literal["stop", "length"] | None = None

    def take(self, request: GenRequest, event: Event) -> bool:
        if self.reason is not None:  # stopped at a stop string: its cancel's echo, if any
            return False
        if isinstance(event, Token):
            self.ids.append(event.token_id)
            if event.logprob is not None:
                self.logprobs.append(event.logprob)
            self.parts.append(self.text.push(event.token_id, event.token_id in request.stop_ids))
            if self.text.stopped:
                self.reason = "stop"
                request.cancel()
                return True
            return False
        if isinstance(event, Done):
            self.reason = event.reason
            self.parts.append(self.text.flush())
            return True
        assert isinstance(event, Failed)
        raise EngineFailed(f"generation failed ({event.status}): {event.message}")

    def completion(self) -> Completion:
        assert self.reason is not None
        logprobs = self.logprobs if len(self.logprobs) == len(self.ids) else None
        return Completion("".join(self.parts), self.ids, logprobs, self.reason)
