"""The replica's HTTP side: OpenAI-compatible endpoints over one `Engine`, on FastAPI.

Requests are checked at the edge (Host, same-origin, JSON, every field) and refused with a 4xx
JSON error in OpenAI's shape naming what was wrong. Inference changes no stored state, so it needs
no service token, only one of the deployment's API keys when it has any (`--api-key-hash`); the
replica binds to loopback unless told otherwise. A streamed reply sends its 200 only
when the first token exists, so an error before that is still a plain HTTP error a router can
retry. Tokenising and detokenising run on the event loop: one thread uses the tokenizer.
"""

import asyncio
import logging
import traceback
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from shipyard.errors import InvalidInput, NotFound, ShipyardError
from shipyard.httpguard import Guard, Refused
from shipyard.httpguard.apikeys import OPEN, ApiKeys
from shipyard.serve.edge import HostCheck
from shipyard.serve.engine import TIERS, Engine, Failed, GenRequest, Overloaded, Sampling, TooLarge
from shipyard.serve.engine.openai import Call, FieldError, parse
from shipyard.serve.replica_replies import (
    EventStream,
    Relay,
    error_reply,
    log_answer,
    sse_chunks,
    whole_reply,
)
from shipyard.serve.request_id import HEADER, request_id

log = logging.getLogger("shipyard.serve.replica")


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


def create_app(served: Served, guard: Guard, keys: ApiKeys = OPEN) -> FastAPI:
    """The replica as an ASGI app; `guard` is used for its Host and body rules only, `keys`
    are the deployment's API keys (none: inference is open)."""
    app = FastAPI(title="Shipyard replica", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(HTTPException)
    async def no_route(request: Request, exc: HTTPException) -> Response:
        return error_reply(
            exc.status_code, f"no endpoint {request.method} {request.url.path[:100]}"
        )

    @app.get("/health")
    async def health() -> JSONResponse:
        return JSONResponse(served.health())

    @app.get("/v1/models")
    async def models() -> JSONResponse:
        return JSONResponse(served.models())

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(
            generate_latest(served.engine.metrics.registry), media_type=CONTENT_TYPE_LATEST
        )

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await _answer(served, guard, keys, "completion", request)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        return await _answer(served, guard, keys, "chat", request)

    named = {"x-shipyard-replica": served.replica, "x-shipyard-artifact": served.artifact}
    app.add_middleware(HostCheck, guard=guard, refuse=error_reply, headers=named)
    return app


async def _answer(
    served: Served, guard: Guard, keys: ApiKeys, kind: str, request: Request
) -> Response:
    """The answer, carrying the request's id (the router's, or a fresh one) in `x-request-id`
    and in its body's `id`."""
    rid = request_id(request.headers)
    reply = await _reply(served, guard, keys, kind, request, rid)
    if reply.status_code != 200:
        log_answer(rid, "", reply.status_code)  # refused before the engine saw it, or failed
    reply.headers[HEADER] = rid
    return reply


async def _reply(
    served: Served, guard: Guard, keys: ApiKeys, kind: str, request: Request, rid: str
) -> Response:
    try:
        body = await _read_body(guard, keys, request)
        call = parse(kind, body)  # type: ignore[arg-type]
        return await _complete(served, call, _tier(request), request, rid)
    except Refused as exc:
        return error_reply(exc.status, exc.reason)
    except FieldError as exc:
        return error_reply(exc.status, str(exc), exc.field)
    except TooLarge as exc:
        return error_reply(400, str(exc), "max_tokens")
    except Overloaded as exc:
        return error_reply(429, str(exc), retry_after=exc.retry_after)
    except NotFound as exc:
        return error_reply(404, str(exc), "model" if "adapter" in str(exc) else None)
    except ShipyardError as exc:
        return error_reply(400, str(exc))
    except ClientDisconnect:  # left while sending its body: nobody reads the answer
        return error_reply(499, "the client closed the connection")
    except Exception:
        log.error(traceback.format_exc())
        return error_reply(500, "internal error (see the replica's log)")


async def _read_body(guard: Guard, keys: ApiKeys, request: Request) -> Any:
    """Same origin, JSON, an API key if the deployment has any, and a body within the guard's
    limit, read only once all that holds."""
    headers = request.headers
    guard.check_inference("POST", headers)
    keys.check(headers)
    declared = headers.get("content-length", "")
    # The server holds a body to its Content-Length, so reading one the guard takes is bounded;
    # a chunked, unsized or too long body is refused from its headers alone.
    ok = "transfer-encoding" not in headers and declared.isdigit()
    raw = await request.body() if ok and int(declared) <= guard.max_body else b""
    return guard.read_json(headers, lambda n: raw[:n])


def _tier(request: Request) -> str:
    tier = (request.headers.get("x-shipyard-tier") or "standard").strip().lower()
    if tier not in TIERS:
        raise InvalidInput(
            f"header x-shipyard-tier: {tier[:40]!r} is not one of {', '.join(TIERS)}"
        )
    return tier


async def _complete(served: Served, call: Call, tier: str, http: Request, rid: str) -> Response:
    request = served.request_for(call, tier)
    relay = request.events = Relay(asyncio.get_running_loop())
    served.engine.submit(request)
    streaming = False
    try:
        first = await relay.next()
        if isinstance(first, Failed):
            return error_reply(first.status, first.message, retry_after=first.retry_after)
        if call.stream:
            streaming = True  # from here the stream cancels the request when it ends
            chunks = sse_chunks(call, request, relay, first, served.tokenizer, rid)
            return EventStream(request, chunks, {HEADER: rid})
        return await whole_reply(call, request, relay, first, served.tokenizer, http, rid)
    finally:
        if not streaming:
            request.cancel()  # a no-op once done; frees the row of a call that ended early
