"""The engine: one thread that runs a causal LM over a continuously batched set of requests.

It is the only code that runs a model forward to generate tokens or score text: the replica's
HTTP API, the evals and RL all submit to it (in process through `LocalEngine`).

Each loop turn admits what fits (tier order, KV budget, free batch rows), prefills each newcomer
alone (reusing the prefix cache), lets it join the running batch, then runs one decode step for
every running row. So a request joins or leaves between two decode steps, never waiting for the
batch to drain. Greedy rows give exactly the tokens `model.generate` gives alone: padding is
masked out and positions are each row's own. A scoring request runs alone when admitted (its
context's KV from and into the prefix cache, so the choices of one item share it) between two
decode steps.
"""

import logging
import threading
import time
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, TypeVar

import torch
from transformers import DynamicCache

from shipyard.errors import InvalidInput
from shipyard.serve.engine.adapters import AdapterSet
from shipyard.serve.engine.kv import (
    cache_of,
    cache_of_blocks,
    keep_rows,
    kv_bytes_per_token,
    layers_of,
    stack_rows,
)
from shipyard.serve.engine.metrics import EngineMetrics
from shipyard.serve.engine.prefix_cache import PrefixCache
from shipyard.serve.engine.request import (
    Done,
    Failed,
    GenRequest,
    LogLikelihood,
    Request,
    ScoreRequest,
    Token,
)
from shipyard.serve.engine.sampler import generator_for, pick
from shipyard.serve.engine.tiers import Admission, TierQueues, TooLarge

log = logging.getLogger("shipyard.serve.engine")
MIB = 1 << 20
R = TypeVar("R", bound=Request)


@dataclass(frozen=True)
class EngineConfig:
    max_batch: int = 8
    kv_budget_bytes: int = 512 * MIB
    prefix_cache_bytes: int = 256 * MIB
    block_size: int = 16
    max_queue: int = 256
    prefill_chunk: int = 256  # prompt tokens per forward; decode steps run between chunks


@dataclass(eq=False)
class _Row:
    request: GenRequest
    length: int  # real tokens in this row's cache
    last: int  # the token to feed next
    generated: int
    cached: int
    gen: torch.Generator | None
    last_emit: float


class Engine:
    def __init__(
        self,
        model: Any,
        config: EngineConfig | None = None,
        *,
        adapters: AdapterSet | None = None,
        metrics: EngineMetrics | None = None,
    ) -> None:
        self.config = config or EngineConfig()
        self.adapters = adapters or AdapterSet(model)
        self.context = int(getattr(model.config, "max_position_embeddings", 2048))
        dtype = next(model.parameters()).dtype
        self.bytes_per_token = kv_bytes_per_token(model.config, dtype)
        admission = Admission(
            self.config.kv_budget_bytes, self.bytes_per_token, self.config.max_queue
        )
        self.queues = TierQueues(admission)
        self.prefix = PrefixCache(self.config.prefix_cache_bytes, self.config.block_size)
        self.metrics = metrics or EngineMetrics()
        self.metrics.bind_queue(self.queues.depth)
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self._rows: list[_Row] = []
        self._cache: DynamicCache | None = None  # the running batch's, left-padded
        self._mask: torch.Tensor | None = None
        self._wake = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="engine", daemon=True)

    # The caller's side

    def start(self) -> "Engine":
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify()
        self._thread.join(timeout=30)

    def submit(self, request: R) -> R:
        """Queue `request`; raises TooLarge, Overloaded or NotFound (unknown adapter) at once."""
        if isinstance(request, ScoreRequest):
            if not request.context_ids or not request.continuation_ids:
                raise InvalidInput("a scoring request needs a context and a continuation token")
            inputs = request.footprint_tokens() - 1  # the last token is a target, never an input
            if inputs > self.context:
                raise TooLarge(
                    f"context + continuation ({inputs + 1} tokens) is over the model's context "
                    f"window of {self.context} tokens (+1)"
                )
        elif len(request.prompt_ids) + request.max_tokens > self.context:
            raise TooLarge(
                f"prompt ({len(request.prompt_ids)} tokens) + max_tokens ({request.max_tokens}) "
                f"is over the model's context window of {self.context} tokens"
            )
        if request.adapter is not None:
            self.adapters.check(request.adapter)
        self.queues.push(request)
        with self._wake:
            self._wake.notify()
        return request

    @property
    def running(self) -> int:
        return len(self._rows)

    def prefix_hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    # The engine thread

    def _loop(self) -> None:
        torch.set_grad_enabled(False)
        while True:
            with self._wake:
                if self._stopping:
                    break
            try:
                self._admit()
                if self._rows:
                    self._step()
            except Exception:  # a bug or an OOM: fail the batch, keep serving
                log.exception("engine step failed")
                for row in self._rows:
                    self._finish(row, Failed(500, "internal engine error (see the replica's log)"))
                self._drop_rows(set(range(len(self._rows))))
            self._publish()
            if not self._rows:
                with self._wake:  # idle, or waiting for an adapter to reach the disk
                    if not self._stopping:
                        waiting = any(self.queues.depth().values())
                        self._wake.wait(timeout=0.02 if waiting else 1.0)
        for row in self._rows:
            self._finish(row, Failed(503, "the replica is shutting down"))
        self._drop_rows(set(range(len(self._rows))))
        for request in self.queues.drain():
            request.events.put(Failed(503, "the replica is shutting down"))

    def _publish(self) -> None:
        self.metrics.running.set(len(self._rows))
        self.metrics.kv_reserved.set(self.queues.reserved)
        self.metrics.prefix_bytes.set(self.prefix.bytes)
        self.metrics.prefix_hit_ratio.set(self.prefix_hit_rate())

    def _admit(self) -> None:
        while True:
            busy = self._busy_adapters()
            request = self.queues.pop_fitting(
                len(self._rows),
                self.config.max_batch,
                partial(self._can_start, busy=busy),
                self._batch_cost,
            )
            if request is None:
                if not self._preempt_for_waiting():
                    return
                continue
            try:
                if request.adapter is not None:
                    problem = self.adapters.error(request.adapter)
                    if problem:
                        self.queues.release(request)
                        request.events.put(Failed(503, problem))
                        continue
                    self.adapters.ensure(request.adapter, busy)
                if isinstance(request, ScoreRequest):
                    self._score(request)
                else:
                    self._prefill(request)
            except Exception as exc:
                self.queues.release(request)
                log.exception("prefill of request %s failed", request.id)
                request.events.put(Failed(500, f"prefill failed: {type(exc).__name__}"))

    def _batch_cost(self, request: Request) -> int:
        """The KV bytes at most with `request` admitted: every batch row padded to the longest,
        and a scoring request's own cache beside the batch (it never joins it)."""
        footprints = [r.request.footprint_tokens() for r in self._rows]
        if isinstance(request, ScoreRequest):
            batch = len(footprints) * max(footprints, default=0)
            return (batch + request.footprint_tokens()) * self.bytes_per_token
        footprints.append(request.footprint_tokens())
        return len(footprints) * max(footprints) * self.bytes_per_token

    def _can_start(self, request: Request, busy: set[str]) -> bool:
        name = request.adapter
        return name is None or bool(self.adapters.error(name)) or self.adapters.ready(name, busy)

    def _busy_adapters(self) -> set[str]:
        return {r.request.adapter for r in self._rows if r.request.adapter is not None}

    def _preempt_for_waiting(self) -> bool:
        """Preempt the newest running batch request if a higher tier waits for its room."""
        head = self.queues.waiting_head()
        if head is None:
            return False
        cost = self.queues.admission.cost(head)
        need = max(self.queues.reserved + cost, self._batch_cost(head))
        blocked = (
            len(self._rows) >= self.config.max_batch or need > self.queues.admission.budget_bytes
        )
        victims = [i for i, r in enumerate(self._rows) if r.request.tier == "batch"]
        if not blocked or not victims:
            return False
        victim = self._rows[victims[-1]]
        self._finish(
            victim,
            Failed(503, "preempted: higher-tier requests needed its KV room", retry_after=1.0),
        )
        self._drop_rows({victims[-1]})
        return True

    def _forward(
        self, ids: torch.Tensor, cache: DynamicCache, adapters: list[str | None], **kw: Any
    ) -> Any:
        return self.adapters.model(
            input_ids=ids, cache=cache, use_cache=True, **kw, **self.adapters.kwargs(adapters)
        )

    def _prefill(self, request: GenRequest) -> None:
        ids = request.prompt_ids
        namespace = request.adapter or ""
        hit = self.prefix.lookup(namespace, ids)
        todo = len(ids) - hit.tokens
        cache = cache_of_blocks(hit.blocks, todo) if hit.blocks else DynamicCache()
        chunk = self.config.prefill_chunk
        for start in range(hit.tokens, len(ids), chunk):
            end = min(start + chunk, len(ids))
            piece = torch.tensor([ids[start:end]], dtype=torch.long)
            positions = torch.arange(start, end, dtype=torch.long).unsqueeze(0)
            out = self._forward(piece, cache, [request.adapter], position_ids=positions)
            if end < len(ids) and self._rows:
                self._step()  # a long prompt does not stall the running batch for its whole prefill
        layers = layers_of(out.cache)
        self.prefix.insert(namespace, ids, layers)
        self._count_prompt(len(ids), hit.tokens)
        gen = generator_for(request.sampling)
        row = _Row(request, len(ids), -1, 0, hit.tokens, gen, time.monotonic())
        if self._emit(row, pick(out.logits[0, -1], request.sampling, gen)):
            self.queues.release(request)
            return
        self._rows.append(row)
        batch = layers_of(self._cache) if self._cache is not None else None
        merged, self._mask = stack_rows(batch, self._mask, layers, len(ids))
        self._cache = cache_of(merged)

    def _score(self, request: ScoreRequest) -> None:
        """Sum the continuation's logprobs: one pass over what the prefix cache lacks, in chunks,
        keeping only the logits of positions that predict a continuation token."""
        context, continuation = request.context_ids, request.continuation_ids
        ids = context + continuation
        namespace = request.adapter or ""
        hit = self.prefix.lookup(namespace, context)  # leaves the context's last token to run
        inputs, first = len(ids) - 1, len(context) - 1  # `first` predicts continuation[0]
        cache = cache_of_blocks(hit.blocks, inputs - hit.tokens) if hit.blocks else DynamicCache()
        chunk, picked = self.config.prefill_chunk, []
        for start in range(hit.tokens, inputs, chunk):
            end = min(start + chunk, inputs)
            keep = end - max(start, first)
            piece = torch.tensor([ids[start:end]], dtype=torch.long)
            positions = torch.arange(start, end, dtype=torch.long).unsqueeze(0)
            out = self._forward(
                piece, cache, [request.adapter], position_ids=positions, logits_to_keep=max(1, keep)
            )
            if keep > 0:
                picked.append(out.logits[0, -keep:])
            if end < inputs and self._rows:
                self._step()
        self.prefix.insert(namespace, context, layers_of(out.cache))
        self._count_prompt(inputs, hit.tokens)
        logprobs = torch.cat(picked).float().log_softmax(-1)
        target = torch.tensor(continuation, dtype=torch.long)
        total = float(logprobs.gather(1, target[:, None]).sum())
        greedy = bool((logprobs.argmax(-1) == target).all())
        self.queues.release(request)
        request.events.put(LogLikelihood(total, greedy))
        self.metrics.requests.labels(request.tier, "ok").inc()

    def _count_prompt(self, total: int, cached: int) -> None:
        self.prompt_tokens += total
        self.cached_tokens += cached
        self.metrics.prefix_lookups.inc()
        if cached:
            self.metrics.prefix_hits.inc()
        self.metrics.prompt_tokens.labels("cache").inc(cached)
        self.metrics.prompt_tokens.labels("computed").inc(total - cached)

    def _step(self) -> None:
        assert self._cache is not None and self._mask is not None
        gone = {i for i, r in enumerate(self._rows) if r.request.cancelled.is_set()}
        if gone:
            for i in gone:
                self._finish(self._rows[i], Failed(499, "cancelled by the client"))
            self._drop_rows(gone)
            if not self._rows:
                return
        batch = len(self._rows)
        ids = torch.tensor([[r.last] for r in self._rows], dtype=torch.long)
        mask = torch.cat([self._mask, torch.ones((batch, 1), dtype=torch.long)], dim=1)
        positions = torch.tensor([[r.length] for r in self._rows], dtype=torch.long)
        out = self._forward(
            ids,
            self._cache,
            [r.request.adapter for r in self._rows],
            attention_mask=mask,
            position_ids=positions,
        )
        self._mask = mask  # the cache grew in place
        finished = set()
        for i, row in enumerate(self._rows):
            row.length += 1
            if self._emit(row, pick(out.logits[i, -1], row.request.sampling, row.gen)):
                finished.add(i)
        if finished:
            self._drop_rows(finished)

    def _drop_rows(self, rows: set[int]) -> None:
        for i in rows:
            self.queues.release(self._rows[i].request)
        keep = [i for i in range(len(self._rows)) if i not in rows]
        self._rows = [self._rows[i] for i in keep]
        if not keep or self._cache is None or self._mask is None:
            self._cache, self._mask = None, None
            return
        kept, self._mask = keep_rows(layers_of(self._cache), self._mask, keep)
        self._cache = cache_of(kept)

    def _emit(self, row: _Row, token: Token) -> bool:
        """Send one token; True when the row is finished (and its Done was sent)."""
        request, now = row.request, time.monotonic()
        if row.generated == 0:
            self.metrics.ttft.labels(request.tier).observe(now - request.submitted)
        else:
            self.metrics.itl.observe(now - row.last_emit)
        row.generated += 1
        row.last, row.last_emit = token.token_id, now
        self.metrics.generated.inc()
        request.events.put(token)
        if token.token_id in request.stop_ids:
            self._finish(row, "stop")
            return True
        if row.generated >= request.max_tokens:
            self._finish(row, "length")
            return True
        return False

    def _finish(self, row: _Row, outcome: "Literal['stop', 'length'] | Failed") -> None:
        request = row.request
        if isinstance(outcome, Failed):
            request.events.put(outcome)
            kind = {503: "preempted", 499: "cancelled"}.get(outcome.status, "error")
            self.metrics.requests.labels(request.tier, kind).inc()
            return
        request.events.put(Done(outcome, len(request.prompt_ids), row.generated, row.cached))
        self.metrics.requests.labels(request.tier, "ok").inc()
