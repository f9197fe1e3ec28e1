"""The replica's HTTP side: OpenAI-compatible endpoints over one `Engine`.

Requests are checked at the edge (Host, same-origin, JSON, every field) and refused with a 4xx
JSON error naming what was wrong. Inference changes no stored state, so it needs no token; the
replica binds to loopback unless told otherwise. A streamed reply sends its 200 only when the
first token exists, so an error before that is still a plain HTTP error a router can retry.
"""

import json
import logging
import queue
import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from shipyard.errors import InvalidInput, NotFound, ShipyardError
from shipyard.httpguard import Guard, Refused
from shipyard.serve.engine import (
    TIERS,
    Done,
    Engine,
    Failed,
    GenRequest,
    Overloaded,
    Sampling,
    Token,
    TooLarge,
)
from shipyard.serve.engine.openai import (
    Call,
    FieldError,
    chunk,
    error_body,
    new_id,
    parse,
    usage,
    whole,
)
from shipyard.serve.engine.text import TextStream

log = logging.getLogger("shipyard.serve.replica")
EVENT_TIMEOUT = 600.0  # seconds without any event from the engine: something is wedged


@dataclass
class Served:
    engine: Engine
    tokenizer: Any
    name: str  # the served base model name
    replica: str  # this replica's name (x-shipyard-replica)
    artifact: str
    stop_ids: frozenset[int]
    default_max_tokens: int = 256
    info: dict[str, Any] = field(default_factory=dict)  # load timings and such, for /health
    _active: int = 0  # completion calls being answered
    _idle: threading.Condition = field(default_factory=threading.Condition)

    @contextmanager
    def answering(self) -> Iterator[None]:
        with self._idle:
            self._active += 1
        try:
            yield
        finally:
            with self._idle:
                self._active -= 1
                self._idle.notify_all()

    def drain(self, timeout: float) -> bool:
        """Wait until every call being answered has had its last byte written."""
        with self._idle:
            return self._idle.wait_for(lambda: self._active == 0, timeout)

    def health(self) -> dict[str, Any]:
        e = self.engine
        return {
            "status": "ok",
            "model": self.name,
            "replica": self.replica,
            "artifact": self.artifact,
            "adapters": e.adapters.names(),
            "adapters_loaded": e.adapters.loaded_names(),
            "queue": e.queues.depth(),
            "running": e.running,
            "kv_used_bytes": e.queues.reserved,
            "kv_budget_bytes": e.queues.admission.budget_bytes,
            "prefix_cache_bytes": e.prefix.bytes,
            "prefix_cache_budget_bytes": e.prefix.budget_bytes,
            "prefix_hit_rate": round(e.prefix_hit_rate(), 4),
            "context_tokens": e.context,
            **self.info,
        }

    def models(self) -> dict[str, Any]:
        data = [{"id": self.name, "object": "model", "owned_by": "shipyard", "root": self.artifact}]
        data += [
            {"id": n, "object": "model", "owned_by": "shipyard", "parent": self.name}
            for n in self.engine.adapters.names()
        ]
        return {"object": "list", "data": data}

    def request_for(self, call: Call, tier: str) -> GenRequest:
        """Tokenise the call and check what only the model knows (names, context, vocab)."""
        adapter = None
        if call.model != self.name:
            if call.model not in self.engine.adapters.names():
                raise FieldError(
                    "model", f"{call.model!r} is not served here (see /v1/models)", 404
                )
            adapter = call.model
        if call.messages is not None:
            try:
                text = self.tokenizer.apply_chat_template(
                    call.messages, tokenize=False, add_generation_prompt=True
                )
            except Exception as exc:  # a template may refuse a role order
                raise FieldError("messages", f"the chat template refused them: {exc}") from None
            ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        elif isinstance(call.prompt, str):
            ids = list(self.tokenizer(call.prompt)["input_ids"])
        else:
            ids = list(call.prompt or [])
            vocab = len(self.tokenizer)
            if any(t >= vocab for t in ids):
                raise FieldError("prompt", f"token ids must be below the vocabulary size {vocab}")
        room = self.engine.context - len(ids)
        if room < 1:
            raise FieldError(
                "prompt",
                f"{len(ids)} tokens leave no room in the {self.engine.context}-token context",
            )
        limit = (
            call.max_tokens if call.max_tokens is not None else min(self.default_max_tokens, room)
        )
        if limit > room:
            raise FieldError(
                "max_tokens",
                f"{limit} + the prompt's {len(ids)} tokens is over the {self.engine.context}-token "
                f"context window (at most {room} here)",
            )
        sampling = Sampling(call.temperature, call.top_p, call.seed, call.top_logprobs)
        return GenRequest(ids, limit, sampling, tier, adapter, self.stop_ids)  # type: ignore[arg-type]


class ReplicaHandler(BaseHTTPRequestHandler):
    served: Served
    guard: Guard
    protocol_version = "HTTP/1.1"
    timeout = 30

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        try:
            self.guard.check("GET", self.headers)  # Host only: inference needs no token
            if method == "GET":
                self._get(path)
                return
            if path not in ("/v1/completions", "/v1/chat/completions"):
                raise NotFound(f"no endpoint POST {path[:100]}")
            self._check_post()
            body = self.guard.read_json(self.headers, self.rfile.read)
            kind = "chat" if path.endswith("chat/completions") else "completion"
            with self.served.answering():
                self._complete(parse(kind, body))  # type: ignore[arg-type]
        except Refused as exc:
            self._error(exc.status, exc.reason)
        except FieldError as exc:
            self._error(exc.status, str(exc), exc.field)
        except TooLarge as exc:
            self._error(400, str(exc), "max_tokens")
        except Overloaded as exc:
            self._error(429, str(exc), retry_after=exc.retry_after)
        except NotFound as exc:
            self._error(404, str(exc), "model" if "adapter" in str(exc) else None)
        except ShipyardError as exc:
            self._error(400, str(exc))
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception:
            log.error(traceback.format_exc())
            self._error(500, "internal error (see the replica's log)")

    def _check_post(self) -> None:
        host = self.headers.get("Host", "")
        origin = self.headers.get("Origin")
        if origin is not None and origin != f"http://{host}":
            raise Refused(403, f"cross-origin request from {origin[:100]!r} refused")
        media = (self.headers.get("Content-Type") or "").partition(";")[0].strip().lower()
        if media != "application/json":
            raise Refused(415, f"Content-Type must be application/json, not {media[:60]!r}")

    def _get(self, path: str) -> None:
        if path == "/health":
            self._json(200, self.served.health())
        elif path == "/v1/models":
            self._json(200, self.served.models())
        elif path == "/metrics":
            data = generate_latest(self.served.engine.metrics.registry)
            self._send(200, data, CONTENT_TYPE_LATEST)
        else:
            raise NotFound(f"no endpoint GET {path[:100]}")

    def _tier(self) -> str:
        tier = (self.headers.get("x-shipyard-tier") or "standard").strip().lower()
        if tier not in TIERS:
            raise InvalidInput(
                f"header x-shipyard-tier: {tier[:40]!r} is not one of {', '.join(TIERS)}"
            )
        return tier

    def _complete(self, call: Call) -> None:
        request = self.served.request_for(call, self._tier())
        self.served.engine.submit(request)
        try:
            first = request.events.get(timeout=EVENT_TIMEOUT)
        except queue.Empty:
            request.cancel()
            raise
        if isinstance(first, Failed):
            self._error(first.status, first.message, retry_after=first.retry_after)
            return
        try:
            if call.stream:
                self._stream(call, request, first)
            else:
                self._whole(call, request, first)
        except OSError:  # the client left: free its batch row
            request.cancel()
            self.close_connection = True

    def _events(self, request: GenRequest, first: Any) -> Any:
        event = first
        while True:
            yield event
            if isinstance(event, Done | Failed):
                return
            event = request.events.get(timeout=EVENT_TIMEOUT)

    def _whole(self, call: Call, request: GenRequest, first: Any) -> None:
        text = TextStream(self.served.tokenizer, call.stop)
        parts, logprobs = [], _Logprobs(call, self.served.tokenizer)
        for event in self._events(request, first):
            if isinstance(event, Token):
                parts.append(text.push(event.token_id, event.token_id in request.stop_ids))
                logprobs.add(event)
                if text.stopped:
                    request.cancel()
                    event = Done("stop", len(request.prompt_ids), len(logprobs.tokens), 0)
                    break
            elif isinstance(event, Failed):
                self._error(event.status, event.message, retry_after=event.retry_after)
                return
        assert isinstance(event, Done)
        parts.append(text.flush())
        use = usage(event.prompt_tokens, event.completion_tokens, event.cached_tokens)
        body = whole(call, new_id(call.kind), "".join(parts), event.reason, use, logprobs.body())
        self._json(200, body)

    def _stream(self, call: Call, request: GenRequest, first: Any) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.send_header("x-shipyard-replica", self.served.replica)
        self.end_headers()
        self.close_connection = True
        rid, text = new_id(call.kind), TextStream(self.served.tokenizer, call.stop)
        if call.kind == "chat":
            self._sse(
                chunk(call, rid, None, None)
                | {"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}
            )
        count = 0
        for event in self._events(request, first):
            if isinstance(event, Token):
                count += 1
                piece = text.push(event.token_id, event.token_id in request.stop_ids)
                extra = {}
                if call.top_logprobs is not None:
                    one = _Logprobs(call, self.served.tokenizer)
                    one.add(event)
                    extra["logprobs"] = one.body()
                if piece or extra:
                    self._sse(chunk(call, rid, piece, None, **extra))
                if text.stopped:
                    request.cancel()
                    event = Done("stop", len(request.prompt_ids), count, 0)
                    break
            elif isinstance(event, Failed):
                self._sse({"error": error_body(event.message, event.status)["error"]})
                self._raw(b"data: [DONE]\n\n")
                return
        assert isinstance(event, Done)
        tail = text.flush()
        final = chunk(call, rid, tail if tail else None, event.reason)
        final["usage"] = usage(event.prompt_tokens, event.completion_tokens, event.cached_tokens)
        self._sse(final)
        self._raw(b"data: [DONE]\n\n")

    def _sse(self, payload: dict[str, Any]) -> None:
        self._raw(b"data: " + json.dumps(payload).encode() + b"\n\n")

    def _raw(self, data: bytes) -> None:
        self.wfile.write(data)
        self.wfile.flush()

    def _json(self, status: int, payload: Any, **headers: str) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json", **headers)

    def _error(
        self, status: int, message: str, param: str | None = None, retry_after: float | None = None
    ) -> None:
        self.close_connection = True  # the body may be unread: do not reuse the connection
        headers = {"Retry-After": str(max(1, round(retry_after)))} if retry_after else {}
        self._json(status, error_body(message, status, param), **headers)

    def _send(self, status: int, data: bytes, content_type: str, **headers: str) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("x-shipyard-replica", self.served.replica)
            if self.close_connection:
                self.send_header("Connection", "close")
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            self.close_connection = True


class _Logprobs:
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
