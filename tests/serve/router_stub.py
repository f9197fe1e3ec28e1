"""A stand-in replica for the router's tests: the replica's HTTP interface, no model.

`python tests/serve/router_stub.py --name r0 [--adapter a ...] [--token-delay S] [--tokens N]`
prints `listening http://127.0.0.1:PORT`. Each answer's text is `<name>` repeated; GET /stats
counts the requests it answered (and started).
"""

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse


@dataclass
class Proc:
    popen: "subprocess.Popen[str]"
    url: str

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(timeout=10)


def start(args: list[str], home: Path | None = None, timeout: float = 60) -> Proc:
    """Start `python ARGS`, wait for its `listening http://...` line (stderr is discarded)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    if home is not None:
        env["SHIPYARD_HOME"] = str(home)
    popen = subprocess.Popen(
        [sys.executable, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert popen.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = popen.stdout.readline()
        if line.startswith("listening "):
            return Proc(popen, line.split()[1])
        if not line and popen.poll() is not None:
            break
    popen.kill()
    raise RuntimeError(f"{args[:3]} did not print its listening line")


def start_stub(name: str, *options: str, port: int = 0) -> Proc:
    return start([__file__, "--name", name, "--port", str(port), *options])


def start_router(home: Path, *options: str) -> Proc:
    return start(["-m", "shipyard.serve.router", "--health-interval", "0.2", *options], home)


def make_app(
    name: str, adapters: list[str], token_delay: float, tokens: int, first_delay: float
) -> FastAPI:
    app = FastAPI()
    counts = {"started": 0, "finished": 0, "in_flight": 0}
    served = {name, *adapters}

    async def answer(request: Request, chat: bool) -> Response:
        body = json.loads(await request.body())
        model = body.get("model")
        if model not in served:
            return JSONResponse({"error": {"message": f"model {model!r} is not served"}}, 404)
        counts["started"] += 1
        counts["in_flight"] += 1
        n = int(body.get("max_tokens") or tokens)
        headers = {"x-shipyard-replica": name}

        def chunk(i: int) -> dict[str, Any]:
            if chat:
                return {"choices": [{"index": 0, "delta": {"content": f"{name} "}}]}
            return {"choices": [{"index": 0, "text": f"{name} "}], "model": model, "n": i}

        if body.get("stream"):

            async def events() -> AsyncIterator[bytes]:
                try:
                    await asyncio.sleep(first_delay)
                    for i in range(n):
                        await asyncio.sleep(token_delay)
                        yield f"data: {json.dumps(chunk(i))}\n\n".encode()
                    yield b"data: [DONE]\n\n"
                    counts["finished"] += 1
                finally:
                    counts["in_flight"] -= 1

            return StreamingResponse(events(), media_type="text/event-stream", headers=headers)
        try:
            await asyncio.sleep(token_delay * n)
        finally:
            counts["in_flight"] -= 1
        counts["finished"] += 1
        text = f"{name} " * n
        choice = {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
        reply = {"model": model, "choices": [{"index": 0, **choice}], "usage": {}}
        return JSONResponse(reply, headers=headers)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await answer(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        return await answer(request, chat=True)

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "model": name,
            "adapters_loaded": adapters,
            "queue": {"interactive": 0, "standard": 0, "batch": 0},
            "running": counts["in_flight"],
            "prefix_hit_rate": 0.0,
        }

    @app.get("/stats")
    def stats() -> dict[str, int]:
        return counts

    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--adapter", action="append", default=[])
    parser.add_argument("--token-delay", type=float, default=0.0)
    parser.add_argument("--tokens", type=int, default=3)
    parser.add_argument("--first-delay", type=float, default=0.0)
    args = parser.parse_args()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(1024)
    print(f"listening http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    app = make_app(args.name, args.adapter, args.token_delay, args.tokens, args.first_delay)
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    sys.exit(main())
