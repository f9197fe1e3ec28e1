"""The demo's deployment: a router process and a deployment controller, as `shipyard serve
deploy` runs them, but with the controller's loop on a thread of the demo so the demo can roll
out to it and end it. Router and replicas are registered with the keeper: they die with the demo.
"""

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from shipyard.errors import NotFound, StorageError
from shipyard.serve.deploy import replicas as rp
from shipyard.serve.deploy.controller import Controller
from shipyard.serve.deploy.loop import run
from shipyard.serve.deploy.spec import parse_spec
from shipyard.workspace import Workspace


def demo_spec(name: str, model: str) -> str:
    """One replica, no autoscaling during the demo, a canary of two short stages."""
    return f"""
name: {name}
model: {model}
replicas: {{min: 1, max: 1}}
autoscale: {{interval_s: 3600}}
canary: {{stages: [50, 100], hold_s: 0.5, replicas: 1}}
"""


@dataclass(frozen=True)
class Answer:
    text: str
    request_id: str
    version: str  # the deployment version (artifact id prefix) that answered


@contextmanager
def deployment(home: Path, name: str, model: str) -> Iterator[tuple[str, Controller]]:
    """Run deployment `name` of `model` (an alias or artifact id) behind a fresh router; yields
    the router's URL and the controller. Everything it started is stopped on the way out."""
    router = rp.start_router(home)
    stop = threading.Event()
    try:
        ctrl = Controller(parse_spec(demo_spec(name, model)), router.url, home)
        try:
            ctrl.start()
            loop = threading.Thread(target=run, args=(ctrl, stop), name="demo-deploy", daemon=True)
            loop.start()
            try:
                yield router.url, ctrl
            finally:
                stop.set()
                loop.join()
        finally:
            ctrl.close()
    finally:
        rp.stop(router)


def ask(router: str, model: str, prompt: str, chat: bool, max_tokens: int = 24) -> Answer:
    """One greedy OpenAI-API request through the router: chat when the model has a chat
    template, else a plain completion."""
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "temperature": 0}
    if chat:
        path, body["messages"] = "/v1/chat/completions", [{"role": "user", "content": prompt}]
    else:
        path, body["prompt"] = "/v1/completions", prompt
    try:
        reply = httpx.post(router + path, json=body, timeout=300)
    except httpx.HTTPError as exc:
        raise StorageError(f"demo request to {router}{path}: {exc}") from None
    if reply.status_code != 200:
        raise StorageError(f"demo request to {router}{path}: {reply.status_code} {reply.text}")
    choice = reply.json()["choices"][0]
    text = choice["message"]["content"] if chat else choice["text"]
    return Answer(
        str(text),
        reply.headers.get("x-request-id", ""),
        reply.headers.get("x-shipyard-version", ""),
    )


def answer_lineage(ws: Workspace, home: Path, request_id: str) -> list[str]:
    """`shipyard lineage request ID` for the demo's answer, waiting for the router's request
    log to have it (the router writes it after the reply)."""
    from shipyard.cli.lineage import _text as lineage_text
    from shipyard.serve.router.lineage import request_lineage

    deadline = time.monotonic() + 60
    while True:
        try:
            return lineage_text(ws, request_lineage(ws, home, request_id))
        except NotFound:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
