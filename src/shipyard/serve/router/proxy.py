"""Forward one inference request: split, pick, send, retry before streaming, relay, count.

A replica that fails before the router has forwarded any byte of its answer (connection refused
or reset, a 502/503/504, a stream that breaks before its first chunk, an unstreamed answer cut
short) costs nothing but time: the request goes to another replica of the same version, each
replica tried at most once. Once bytes have reached the client, a failure (a broken connection,
or an SSE stream that ends without `[DONE]`, which is how a replica that closes its connection
to end a stream dies) ends the stream with one SSE error event,
`data: {"error": {"type": "replica_failed", ...}}`, and no `[DONE]`.
"""

import asyncio
import json
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
from fastapi import Response
from fastapi.responses import StreamingResponse

from shipyard.serve.router.metrics import RouterMetrics
from shipyard.serve.router.mirror import StreamText, answer_text
from shipyard.serve.router.request import InferenceRequest
from shipyard.serve.router.requestlog import Answered, Writer, artifact_or_none, usage_tokens
from shipyard.serve.router.spec import VersionSpec
from shipyard.serve.router.stats import MirrorRecord
from shipyard.serve.router.table import Deployment, ReplicaState, Table, Unavailable

RETRY_STATUS = frozenset({502, 503, 504})
PASS_HEADERS = ("x-shipyard-tier", "authorization")
MAX_ERROR_BODY = 64 << 10
MIRROR_WAIT_S = 600.0
STREAM_TAIL = 4096  # the end of a stream kept: `[DONE]` and the last chunk's usage are in it


@dataclass
class Opened:
    """A 200 answer whose first chunk has arrived: from here on the client sees bytes."""

    upstream: httpx.Response
    first: bytes
    rest: AsyncIterator[bytes]


@dataclass(frozen=True)
class Refusal:
    """A replica's 502/503/504: tried elsewhere, and passed on if no replica does better."""

    why: str
    status: int
    body: bytes
    headers: dict[str, str]


@dataclass
class Forwarder:
    table: Table
    client: httpx.AsyncClient
    metrics: RouterMetrics
    log: Writer | None = None
    _tasks: set["asyncio.Task[None]"] = field(default_factory=set)

    async def handle(
        self, path: str, request: InferenceRequest, rid: str, headers: Mapping[str, str]
    ) -> Response:
        start = time.perf_counter()
        deployment, adapter = self.table.resolve(request.model)
        version = self.table.version_for(deployment, rid, adapter)
        shadow = self.table.mirror_for(deployment, rid, version.version, adapter)
        primary: asyncio.Future[tuple[int, str]] = asyncio.get_running_loop().create_future()
        sent = {"content-type": "application/json", "x-request-id": rid}
        sent |= {k: v for k, v in headers.items() if k in PASS_HEADERS}
        if shadow is not None:
            task = asyncio.create_task(
                self._mirror(
                    deployment, version.version, shadow, path, request, sent, adapter, primary
                )
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        try:
            response = await self._route(
                deployment, version, path, request, rid, adapter, sent, start, primary
            )
        except BaseException:
            if not primary.done():
                primary.set_result((0, ""))
            raise
        if not primary.done() and not isinstance(response, RelayResponse):
            primary.set_result((response.status_code, ""))
        return response

    async def _route(
        self,
        deployment: Deployment,
        version: VersionSpec,
        path: str,
        request: InferenceRequest,
        rid: str,
        adapter: str | None,
        sent: dict[str, str],
        start: float,
        primary: "asyncio.Future[tuple[int, str]]",
    ) -> Response:
        stats = deployment.stats.version(version.version)
        tried: set[str] = set()
        failures: list[str] = []
        refusal: Refusal | None = None
        while True:
            try:
                state, choice = self.table.pick(
                    deployment, version.version, request, adapter, frozenset(tried)
                )
            except Unavailable as exc:
                stats.record(None, error=True)
                if not primary.done():
                    primary.set_result((503, ""))
                self.count(deployment, version, refusal.status if refusal else 503)
                if refusal is not None:  # e.g. a scaled-to-zero stand-in's 503 + Retry-After
                    return Response(refusal.body, refusal.status, refusal.headers)
                reasons = "; ".join(failures) if failures else str(exc)
                raise Unavailable(
                    f"deployment {deployment.name!r} version {version.version!r}: "
                    f"no replica answered ({reasons[:800]})"
                ) from None
            if tried:
                stats.retries += 1
                self.metrics.retries.labels(deployment.name).inc()
            else:
                self.metrics.routes.labels(deployment.name, choice.outcome).inc()
            tried.add(state.name)
            state.in_flight += 1
            released = False
            try:
                body = _body_for(request, state, adapter)
                opened = await self._open(state, path, body, sent)
                if isinstance(opened, Refusal):
                    refusal = opened
                if not isinstance(opened, Opened):
                    failures.append(opened if isinstance(opened, str) else opened.why)
                    continue
                ttft = time.perf_counter() - start
                reply = {
                    "x-request-id": rid,
                    "x-shipyard-version": version.version,
                    "x-shipyard-replica": opened.upstream.headers.get(
                        "x-shipyard-replica", state.name
                    ),
                }
                status = opened.upstream.status_code
                if status == 200 and request.stream:
                    self.metrics.ttft.labels(deployment.name, version.version).observe(ttft)
                    released = True  # the relay releases the replica when the stream ends
                    answered = self.answered(rid, deployment, version, adapter, state, opened)
                    relay = Relay(self, deployment, version, state, opened, ttft, primary, answered)
                    return RelayResponse(
                        relay,
                        headers=reply,
                        media_type=opened.upstream.headers.get("content-type", "text/event-stream"),
                    )
                try:
                    whole = opened.first + b"".join([c async for c in opened.rest])
                except httpx.HTTPError as exc:
                    failures.append(failure(state, exc, "while answering"))
                    continue
                finally:
                    await opened.upstream.aclose()
                ttft = time.perf_counter() - start  # unstreamed: the first byte is the answer
                if status == 200:
                    self.metrics.ttft.labels(deployment.name, version.version).observe(ttft)
                stats.record(ttft if status == 200 else None, error=status >= 500)
                self.count(deployment, version, status)
                answered = self.answered(rid, deployment, version, adapter, state, opened)
                self.write(answered, status, _whole_json(whole) if status == 200 else None)
                if not primary.done():
                    primary.set_result((status, answer_text(whole) if status == 200 else ""))
                return Response(
                    whole[: MAX_ERROR_BODY if status != 200 else None],
                    status_code=status,
                    headers=reply,
                    media_type=opened.upstream.headers.get("content-type", "application/json"),
                )
            finally:
                if not released:
                    state.in_flight -= 1

    async def _open(
        self, state: ReplicaState, path: str, body: bytes, sent: dict[str, str]
    ) -> Opened | Refusal | str:
        """The replica's answer up to its first chunk, or why it failed before any byte."""
        outgoing = self.client.build_request("POST", state.url + path, content=body, headers=sent)
        try:
            upstream = await self.client.send(outgoing, stream=True)
        except httpx.HTTPError as exc:
            return failure(state, exc, "before answering")
        if upstream.status_code in RETRY_STATUS:
            body = b""
            try:
                async for chunk in upstream.aiter_raw():
                    body += chunk
                    if len(body) > MAX_ERROR_BODY:
                        break
            except httpx.HTTPError:
                pass  # the status says enough
            finally:
                await upstream.aclose()
            kept = {
                k: v for k, v in upstream.headers.items() if k in ("retry-after", "content-type")
            }
            why = f"{state.name}: answered {upstream.status_code}"
            return Refusal(why, upstream.status_code, body[:MAX_ERROR_BODY], kept)
        rest = upstream.aiter_raw()
        try:
            first = await anext(rest, b"")
        except httpx.HTTPError as exc:
            await upstream.aclose()
            return failure(state, exc, "before its first byte")
        return Opened(upstream, first, rest)

    async def _mirror(
        self,
        deployment: Deployment,
        primary_version: str,
        shadow: VersionSpec,
        path: str,
        request: InferenceRequest,
        sent: dict[str, str],
        adapter: str | None,
        primary: "asyncio.Future[tuple[int, str]]",
    ) -> None:
        """Send a copy to the shadow version; its answer is kept for the eval gate, not sent.
        It carries the same headers as the primary's (the client's API key among them)."""
        rid = sent["x-request-id"]
        start = time.perf_counter()
        status, text, error = 0, "", ""
        try:
            state, _ = self.table.pick(deployment, shadow.version, request, adapter)
            state.in_flight += 1
            try:
                reply = await self.client.post(
                    state.url + path,
                    content=_body_for(request, state, adapter, stream=False),
                    headers=sent,
                )
                status, text = reply.status_code, answer_text(reply.content)
            finally:
                state.in_flight -= 1
        except (httpx.HTTPError, Unavailable) as exc:
            error = f"{type(exc).__name__}: {exc}"[:300]
        latency = time.perf_counter() - start
        try:
            primary_status, primary_text = await asyncio.wait_for(primary, MIRROR_WAIT_S)
        except TimeoutError:
            primary_status, primary_text = 0, ""
        deployment.stats.mirrored.append(
            MirrorRecord(
                rid,
                time.time(),
                request.body,
                primary_version,
                primary_status,
                primary_text,
                shadow.version,
                status,
                text,
                error,
                latency,
            )
        )
        self.metrics.mirrored.labels(deployment.name, shadow.version).inc()

    def count(self, deployment: Deployment, version: VersionSpec, status: int) -> None:
        self.metrics.requests.labels(deployment.name, version.version, str(status)).inc()

    def answered(
        self,
        rid: str,
        deployment: Deployment,
        version: VersionSpec,
        adapter: str | None,
        state: ReplicaState,
        opened: Opened,
    ) -> Answered:
        """The request log's record of this answer, status and tokens still to be filled."""
        claimed = opened.upstream.headers.get("x-shipyard-artifact") or state.health.get("artifact")
        return Answered(
            rid,
            time.time(),
            deployment.name,
            version.version,
            artifact_or_none(claimed),
            adapter,
            state.name,
            0,
            None,
            None,
            "text/event-stream" in opened.upstream.headers.get("content-type", ""),
        )

    def write(self, answered: Answered, status: int, body: Any) -> None:
        """Queue `answered` for the request log with its status and the tokens `body` counts."""
        if self.log is not None:
            tokens_in, tokens_out = usage_tokens(body)
            self.log.record(
                replace(answered, status=status, tokens_in=tokens_in, tokens_out=tokens_out)
            )


def failure(state: ReplicaState, exc: httpx.HTTPError, when: str) -> str:
    """Why `state` failed; a dead replica (not a slow one) leaves rotation until it answers."""
    why = f"{state.name}: {type(exc).__name__} {when}"
    if not isinstance(exc, httpx.TimeoutException):
        state.mark_down(why)
    return why


class Relay:
    """One streamed answer on its way to the client; `finish` settles it exactly once."""

    def __init__(
        self,
        forwarder: Forwarder,
        deployment: Deployment,
        version: VersionSpec,
        state: ReplicaState,
        opened: Opened,
        ttft: float,
        primary: "asyncio.Future[tuple[int, str]]",
        answered: Answered,
    ) -> None:
        self.forwarder, self.deployment, self.version = forwarder, deployment, version
        self.answered = answered  # the request log's record, written when the stream ends
        self.state, self.opened, self.ttft, self.primary = state, opened, ttft, primary
        self.text = StreamText() if not primary.done() else None
        self.error = False
        self.finished = False
        self.tail = b""
        self.sse = opened.upstream.headers.get("content-type", "").startswith("text/event-stream")

    async def chunks(self) -> AsyncIterator[bytes]:
        why = ""
        try:
            if self.opened.first:
                yield self._seen(self.opened.first)
            async for chunk in self.opened.rest:
                yield self._seen(chunk)
            # A replica may end its stream by closing the connection, so a death looks like an
            # end: only `[DONE]` says the answer is whole.
            if self.sse and b"[DONE]" not in self.tail:
                why = f"{self.state.name}: the stream ended before [DONE]"
                self.state.mark_down(why)
        except httpx.HTTPError as exc:
            why = failure(self.state, exc, "mid-stream")
        finally:
            if why:
                self.error = True
            await self.finish()
        if why:
            event = {
                "error": {
                    "type": "replica_failed",
                    "message": f"replica {why}; the answer is incomplete",
                    "replica": self.state.name,
                }
            }
            yield f"data: {json.dumps(event)}\n\n".encode()

    def _seen(self, chunk: bytes) -> bytes:
        self.tail = (self.tail + chunk)[-STREAM_TAIL:]
        if self.text is not None:
            self.text.feed(chunk)
        return chunk

    async def finish(self) -> None:
        if self.finished:
            return
        self.finished = True
        self.state.in_flight -= 1
        status = 599 if self.error else 200  # 599: failed after the 200 was sent
        self.deployment.stats.version(self.version.version).record(self.ttft, error=self.error)
        self.forwarder.count(self.deployment, self.version, status)
        self.forwarder.write(self.answered, status, _last_usage(self.tail))
        if not self.primary.done():
            self.primary.set_result((status, self.text.text() if self.text else ""))
        await self.opened.upstream.aclose()


class RelayResponse(StreamingResponse):
    """A streaming response that settles its relay even if the client leaves before the body."""

    def __init__(self, relay: Relay, headers: dict[str, str], media_type: str) -> None:
        super().__init__(relay.chunks(), status_code=200, headers=headers, media_type=media_type)
        self.relay = relay

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await asyncio.shield(self.relay.finish())


def _whole_json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def _last_usage(tail: bytes) -> Any:
    """The last SSE event in `tail` that carries `usage` (the replica's final chunk)."""
    for event in reversed(tail.split(b"\n\n")):
        line = event.strip()
        if line.startswith(b"data:") and b'"usage"' in line:
            return _whole_json(line[5:])
    return None


def _body_for(
    request: InferenceRequest, state: ReplicaState, adapter: str | None, stream: bool | None = None
) -> bytes:
    """The body for `state`: a base request names the replica's served model."""
    body: dict[str, Any] = dict(request.body)
    if adapter is None and state.served_model:
        body["model"] = state.served_model
    if stream is not None:
        body["stream"] = stream
    return json.dumps(body).encode()
