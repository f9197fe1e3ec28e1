"""The replica's answers to one completion call: the engine's events turned into a JSON reply or
an SSE stream, on the event loop.

The engine thread writes each request's events into a `Relay`, which wakes the event loop; no
thread waits per request. However a reply ends (done, stopped by a stop string, the client gone),
its engine request is cancelled, so an abandoned one frees its batch row at the next step.
"""

import asyncio
import contextlib
import json
import queue
import sys
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.types import Receive, Scope, Send

from shipyard.serve.engine import Done, Failed, GenRequest, Token
from shipyard.serve.engine.openai import Call, chunk, error_body, response_id, usage, whole
from shipyard.serve.engine.request import Event
from shipyard.serve.engine.text import TextStream

EVENT_TIMEOUT = 600.0  # seconds without any event from the engine: something is wedged


class Relay(queue.Queue[Event]):
    """A request's event queue that the engine thread fills and the event loop awaits."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._loop = loop
        self._ready = asyncio.Event()

    def put(self, item: Event, block: bool = True, timeout: float | None = None) -> None:
        super().put(item, block, timeout)
        # A closed loop means the process is shutting down: nobody waits for the event.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._ready.set)

    async def next(self, timeout: float = EVENT_TIMEOUT) -> Event:
        """The next event; a Failed(500) if the engine sends none within `timeout` seconds."""
        while True:
            try:
                return self.get_nowait()
            except queue.Empty:
                pass
            self._ready.clear()
            try:  # an event put between the first look and clear() has already set _ready
                return self.get_nowait()
            except queue.Empty:
                pass
            try:
                await asyncio.wait_for(self._ready.wait(), timeout)
            except TimeoutError:
                return Failed(500, f"the engine sent nothing for {timeout:.0f} s")


def error_reply(
    status: int, message: str, param: str | None = None, retry_after: float | None = None
) -> JSONResponse:
    """An error in OpenAI's shape; `Retry-After` in whole seconds when given."""
    headers = {"Retry-After": str(max(1, round(retry_after)))} if retry_after else None
    return JSONResponse(error_body(message, status, param), status, headers=headers)


def log_answer(rid: str, model: str, status: int, done: Done | None = None) -> None:
    """One JSON line on stderr per answer (an error reply is logged by whoever sends it)."""
    line: dict[str, Any] = {"event": "answered", "request_id": rid, "model": model}
    line["status"] = status
    if done is not None:
        line |= {"prompt_tokens": done.prompt_tokens, "completion_tokens": done.completion_tokens}
    print(json.dumps(line), file=sys.stderr, flush=True)


async def whole_reply(
    call: Call,
    request: GenRequest,
    relay: Relay,
    first: Event,
    tokenizer: Any,
    http: Request,
    rid: str,
) -> JSONResponse:
    """Collect the events into one reply; stop early (cancelled) if the client leaves."""
    text = TextStream(tokenizer, call.stop)
    parts, logprobs = [], Logprobs(call, tokenizer)
    event = first
    while isinstance(event, Token):
        parts.append(text.push(event.token_id, event.token_id in request.stop_ids))
        logprobs.add(event)
        if text.stopped:
            event = Done("stop", len(request.prompt_ids), len(logprobs.tokens), 0)
            break
        if await http.is_disconnected():
            return error_reply(499, "the client closed the connection")
        event = await relay.next()
    if isinstance(event, Failed):
        return error_reply(event.status, event.message, retry_after=event.retry_after)
    assert isinstance(event, Done)
    parts.append(text.flush())
    use = usage(event.prompt_tokens, event.completion_tokens, event.cached_tokens)
    log_answer(rid, call.model, 200, event)
    return JSONResponse(
        whole(call, response_id(call.kind, rid), "".join(parts), event.reason, use, logprobs.body())
    )


class EventStream(StreamingResponse):
    """An SSE reply that cancels its engine request however it ends, even before it starts."""

    def __init__(
        self, request: GenRequest, chunks: AsyncIterator[bytes], headers: dict[str, str]
    ) -> None:
        super().__init__(
            chunks, media_type="text/event-stream", headers={"Cache-Control": "no-cache", **headers}
        )
        self.request = request

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.request.cancel()


async def sse_chunks(
    call: Call, request: GenRequest, relay: Relay, first: Event, tokenizer: Any, rid: str
) -> AsyncIterator[bytes]:
    """`data: {...}` chunks, then the usage, then `data: [DONE]`; a failure after the first
    token (a preemption, the engine stopping) is an `error` event before `[DONE]`."""
    answer_id, text = response_id(call.kind, rid), TextStream(tokenizer, call.stop)
    if call.kind == "chat":
        role = {"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}
        yield _data(chunk(call, answer_id, None, None) | {"choices": [role]})
    count, event = 0, first
    while isinstance(event, Token):
        count += 1
        piece = text.push(event.token_id, event.token_id in request.stop_ids)
        extra = {}
        if call.top_logprobs is not None:
            one = Logprobs(call, tokenizer)
            one.add(event)
            extra["logprobs"] = one.body()
        if piece or extra:
            yield _data(chunk(call, answer_id, piece, None, **extra))
        if text.stopped:
            request.cancel()
            event = Done("stop", len(request.prompt_ids), count, 0)
            break
        event = await relay.next()
    if isinstance(event, Failed):
        log_answer(rid, call.model, event.status)
        yield _data({"error": error_body(event.message, event.status)["error"]})
    else:
        assert isinstance(event, Done)
        log_answer(rid, call.model, 200, event)
        tail = text.flush()
        final = chunk(call, answer_id, tail if tail else None, event.reason)
        final["usage"] = usage(event.prompt_tokens, event.completion_tokens, event.cached_tokens)
        yield _data(final)
    yield b"data: [DONE]\n\n"


def _data(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


class Logprobs:
    """The `logprobs` object of a choice, in the completions or the chat shape."""

    def __init__(self, call: Call, tokenizer: Any) -> None:
        self.call, self.tokenizer = call, tokenizer
        self.tokens: list[Token] = []

    def add(self, token: Token) -> None:
        self.tokens.append(token)

    def _word(self, token_id: int) -> str:
        return str(self.tokenizer.decode([token_id]))

    def body(self) -> Any:
        if self.call.top_logprobs is None:
            return None
        word = self._word
        if self.call.kind == "chat":
            return {
                "content": [
                    {
                        "token": word(t.token_id),
                        "logprob": t.logprob,
                        "top_logprobs": [{"token": word(i), "logprob": lp} for i, lp in t.top],
                    }
                    for t in self.tokens
                ]
            }
        return {
            "tokens": [word(t.token_id) for t in self.tokens],
            "token_logprobs": [t.logprob for t in self.tokens],
            "top_logprobs": [{word(i): lp for i, lp in t.top} for t in self.tokens],
        }
