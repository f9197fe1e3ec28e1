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
    Layers,
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
    score_batch: int = 16  # scoring requests answered together (their continuations batched)


@dataclass(frozen=True)
class _Context:
    """The last scored context: its KV and the logits that predict what follows it."""

    key: tuple[str, tuple[int, ...]]  # (adapter namespace, token ids)
    layers: Layers
    logits: torch.Tensor  # [1, vocab]


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
        self._context: _Context | None = None  # engine thread only
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
        scores: list[ScoreRequest] = []  # consecutive scoring requests of one adapter
        while True:
            busy = self._busy_adapters()
            request = self.queues.pop_fitting(
                len(self._rows),
                self.config.max_batch,
                partial(self._can_start, busy=busy),
                self._batch_cost,
            )
            joins = (
                isinstance(request, ScoreRequest)
                and len(scores) < self.config.score_batch
                and (not scores or request.adapter == scores[0].adapter)
            )
            if scores and not joins:
                self._score_group(scores)
                scores = []
                if request is None:
                    continue  # their reservations are free again: look again for room
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
                    scores.append(request)
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

    def _run(
        self, ids: list[int], start: int, cache: DynamicCache, adapter: str | None, keep: int
    ) -> torch.Tensor:
        """Feed `ids` (at positions from `start`) into `cache` alone, in chunks, with a decode
        step of the running batch between chunks; the logits of the last `keep` of them."""
        chunk, end, picked = self.config.prefill_chunk, start + len(ids), []
        for at in range(start, end, chunk):
            stop = min(at + chunk, end)
            wanted = stop - max(at, end - keep)  # only these go through the output layer
            piece = torch.tensor([ids[at - start : stop - start]], dtype=torch.long)
            positions = torch.arange(at, stop, dtype=torch.long).unsqueeze(0)
            out = self._forward(
                piece, cache, [adapter], position_ids=positions, logits_to_keep=max(1, wanted)
            )
            if wanted > 0:
                picked.append(out.logits[0, -wanted:])
            if stop < end and self._rows:
                self._step()  # a long prompt does not stall the running batch for its whole prefill
        return torch.cat(picked)

    def _prefill(self, request: GenRequest) -> None:
        ids = request.prompt_ids
        namespace = request.adapter or ""
        hit = self.prefix.lookup(namespace, ids)
        todo = len(ids) - hit.tokens
        cache = cache_of_blocks(hit.blocks, todo) if hit.blocks else DynamicCache()
        logits = self._run(ids[hit.tokens :], hit.tokens, cache, request.adapter, keep=1)
        layers = layers_of(cache)
        self.prefix.insert(namespace, ids, layers)
        self._count_prompt(len(ids), hit.tokens)
        gen = generator_for(request.sampling)
        row = _Row(request, len(ids), -1, 0, hit.tokens, gen, time.monotonic())
        if self._emit(row, pick(logits[-1], request.sampling, gen)):
            self.queues.release(request)
            return
        self._rows.append(row)
        batch = layers_of(self._cache) if self._cache is not None else None
        merged, self._mask = stack_rows(batch, self._mask, layers, len(ids))
        self._cache = cache_of(merged)

    def _score_group(self, requests: list[ScoreRequest]) -> None:
        """Answer `requests` (admitted, one adapter); a failure fails them all (each alone
        again is its caller's choice)."""
        try:
            scores = self._score(requests)
        except Exception as exc:
            log.exception("scoring %d requests failed", len(requests))
            scores = [Failed(500, f"scoring failed: {type(exc).__name__}")] * len(requests)
        for request, score in zip(requests, scores, strict=True):
            self.queues.release(request)
            request.events.put(score)
            outcome = "ok" if isinstance(score, LogLikelihood) else "error"
            self.metrics.requests.labels(request.tier, outcome).inc()

    def _score(self, requests: list[ScoreRequest]) -> list[LogLikelihood | Failed]:
        """Each request's summed continuation logprob. A context runs once however many
        requests share it (the last one scored is kept, so a multiple-choice item's choices
        share it whatever its length; otherwise the prefix cache serves its whole blocks), then
        the continuations run together as one right-padded batch over their contexts' KV (left-
        padded). Only positions that predict a continuation token go through the output layer."""
        contexts: dict[tuple[str, tuple[int, ...]], _Context] = {}
        if self._context is not None:
            contexts[self._context.key] = self._context
        short: dict[tuple[str, tuple[int, ...]], ScoreRequest] = {}
        for r in requests:
            key = (r.adapter or "", tuple(r.context_ids))
            if key in contexts or key in short:
                self._count_prompt(len(r.context_ids), len(r.context_ids))
            elif len(r.context_ids) <= self.config.prefill_chunk:
                short[key] = r  # short contexts run together, without the prefix cache
            else:
                contexts[key] = self._run_context(key[0], r.context_ids, r.adapter)
        if short:
            contexts |= self._run_contexts(list(short.values()))
        last = requests[-1]
        self._context = contexts[(last.adapter or "", tuple(last.context_ids))]
        rest: dict[int, torch.Tensor] = {}
        longer = [r for r in requests if len(r.continuation_ids) > 1]
        width = self.config.prefill_chunk
        for r in [r for r in longer if len(r.continuation_ids) > width + 1]:  # alone, in chunks
            memo = contexts[(r.adapter or "", tuple(r.context_ids))]
            ids = r.continuation_ids[:-1]
            cache = cache_of(memo.layers, len(ids))
            rest[r.id] = self._run(ids, len(r.context_ids), cache, r.adapter, keep=len(ids))
        together = [r for r in longer if r.id not in rest]
        if together:
            rest |= self._continue(together, contexts)
        out: list[LogLikelihood | Failed] = []
        for r in requests:
            memo = contexts[(r.adapter or "", tuple(r.context_ids))]
            rows = [memo.logits, rest[r.id]] if r.id in rest else [memo.logits]
            logprobs = torch.cat(rows).float().log_softmax(-1)
            target = torch.tensor(r.continuation_ids, dtype=torch.long)
            total = float(logprobs.gather(1, target[:, None]).sum())
            out.append(LogLikelihood(total, bool((logprobs.argmax(-1) == target).all())))
        return out

    def _continue(
        self, requests: list[ScoreRequest], contexts: dict[tuple[str, tuple[int, ...]], _Context]
    ) -> dict[int, torch.Tensor]:
        """One forward of every request's continuation (but its last token) after its context:
        the logits of each real position, by request id."""
        layers: Layers | None = None
        mask: torch.Tensor | None = None
        for r in requests:
            memo = contexts[(r.adapter or "", tuple(r.context_ids))]
            layers, mask = stack_rows(layers, mask, memo.layers, len(r.context_ids))
        assert layers is not None and mask is not None
        width = max(len(r.continuation_ids) for r in requests) - 1
        ids = torch.zeros((len(requests), width), dtype=torch.long)
        real = torch.zeros((len(requests), width), dtype=torch.long)
        for n, r in enumerate(requests):
            tokens = r.continuation_ids[:-1]
            ids[n, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
            real[n, : len(tokens)] = 1  # padding sits after every real token: it changes none
        starts = torch.tensor([[len(r.context_ids)] for r in requests], dtype=torch.long)
        out = self._forward(
            ids,
            cache_of(layers, width),
            [r.adapter for r in requests],
            attention_mask=torch.cat([mask, real], dim=1),
            position_ids=starts + torch.arange(width, dtype=torch.long)[None, :],
            logits_to_keep=width,
        )
        return {r.id: out.logits[n, : len(r.continuation_ids) - 1] for n, r in enumerate(requests)}

    def _run_contexts(
        self, requests: list[ScoreRequest]
    ) -> dict[tuple[str, tuple[int, ...]], _Context]:
        """Distinct short contexts in one right-padded forward (padding after every real token
        changes none); each row's KV is its own first columns."""
        width = max(len(r.context_ids) for r in requests)
        ids = torch.zeros((len(requests), width), dtype=torch.long)
        real = torch.zeros((len(requests), width), dtype=torch.long)
        for n, r in enumerate(requests):
            ids[n, : len(r.context_ids)] = torch.tensor(r.context_ids, dtype=torch.long)
            real[n, : len(r.context_ids)] = 1
        ends = sorted({len(r.context_ids) - 1 for r in requests})  # positions that need logits
        cache = DynamicCache()
        out = self._forward(
            ids,
            cache,
            [r.adapter for r in requests],
            attention_mask=real,
            position_ids=torch.arange(width, dtype=torch.long)[None, :].repeat(len(requests), 1),
            logits_to_keep=torch.tensor(ends, dtype=torch.long),
        )
        layers = layers_of(cache)
        made = {}
        for n, r in enumerate(requests):
            size, key = len(r.context_ids), (r.adapter or "", tuple(r.context_ids))
            own = [(k[n : n + 1, :, :size], v[n : n + 1, :, :size]) for k, v in layers]
            self.prefix.insert(key[0], r.context_ids, own)
            self._count_prompt(size, 0)
            made[key] = _Context(key, own, out.logits[n, ends.index(size - 1)][None])
        return made

    def _run_context(self, namespace: str, context: list[int], adapter: str | None) -> "_Context":
        hit = self.prefix.lookup(namespace, context)  # leaves the context's last token to run
        todo = len(context) - hit.tokens
        cache = cache_of_blocks(hit.blocks, todo) if hit.blocks else DynamicCache()
        logits = self._run(context[hit.tokens :], hit.tokens, cache, adapter, keep=1)
        layers = layers_of(cache)
        self.prefix.insert(namespace, context, layers)
        self._count_prompt(len(context), hit.tokens)
        return _Context((namespace, tuple(context)), layers, logits)

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
