"""`python -m shipyard.serve.replica`: one model (and its adapters) behind an OpenAI-compatible API.

Cold start is materialise (artifact store → local cache, skipped when cached) then load (weights
into memory); both are timed, logged as one JSON line on stderr and reported in /health. The line
`listening http://HOST:PORT` on stdout says the replica is ready.
"""

import argparse
import contextlib
import json
import os
import secrets
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from shipyard.cli.argtypes import port
from shipyard.errors import InvalidInput, ShipyardError
from shipyard.home import shipyard_home
from shipyard.httpguard import Guard, is_loopback
from shipyard.httpguard.apikeys import ApiKeys, parse_hashes
from shipyard.httpguard.asgi import start_server
from shipyard.serve.models import ADAPTER_KIND, materialise
from shipyard.serve.replica_http import Served, create_app
from shipyard.trust.audit import Reader
from shipyard.workspace import Workspace

MIB = 1 << 20


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m shipyard.serve.replica", description=__doc__)
    p.add_argument("--model", required=True, help="model artifact: alias, id or id prefix")
    p.add_argument(
        "--adapter",
        action="append",
        default=[],
        metavar="NAME=REF",
        help="a LoRA adapter artifact served under NAME (repeatable)",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=port, default=0, help="0: any free port")
    p.add_argument("--allow-remote", action="store_true", help="allow a non-loopback --host")
    p.add_argument(
        "--kv-cache-mib",
        type=float,
        default=512,
        help="KV budget of running requests, prompt + max_tokens each (default 512)",
    )
    p.add_argument(
        "--prefix-cache-mib",
        type=float,
        default=256,
        help="bound of the prefix KV cache (default 256; 0 turns it off)",
    )
    p.add_argument("--block-tokens", type=int, default=16, help="prefix-cache block size")
    p.add_argument(
        "--prefill-chunk",
        type=int,
        default=256,
        help="prompt tokens per forward pass; the running batch steps between chunks",
    )
    p.add_argument("--max-batch", type=int, default=8, help="running requests at most")
    p.add_argument("--max-queue", type=int, default=256, help="waiting requests per tier")
    p.add_argument("--max-adapters", type=int, default=4, help="adapters loaded at once")
    p.add_argument("--max-tokens-default", type=int, default=256)
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument(
        "--drain-seconds",
        type=float,
        default=30.0,
        help="on SIGTERM, how long requests already taken may take to finish (default 30)",
    )
    p.add_argument("--name", help="replica name for x-shipyard-replica (default replica-PID)")
    p.add_argument("--served-model-name", help="the `model` requests use (default: --model)")
    p.add_argument(
        "--cache-dir", type=Path, help="local model cache (default $SHIPYARD_HOME/cache/models)"
    )
    p.add_argument(
        "--api-key-hash",
        action="append",
        default=[],
        metavar="sha256:HEX",
        help="inference needs a key with this hash (repeatable; none: open)",
    )
    args = p.parse_args(argv)
    try:
        args.keys = ApiKeys(parse_hashes(args.api_key_hash, "--api-key-hash"))
    except InvalidInput as exc:
        p.error(str(exc))
    lows = {
        "kv_cache_mib": 0.01,
        "prefix_cache_mib": 0.0,
        "max_batch": 1,
        "max_queue": 1,
        "max_adapters": 1,
        "threads": 1,
        "block_tokens": 1,
        "prefill_chunk": 1,
        "max_tokens_default": 1,
        "drain_seconds": 0.0,
    }
    for name, low in lows.items():
        if not getattr(args, name) >= low:  # NaN fails too
            p.error(f"--{name.replace('_', '-')} must be at least {low}")
    if not is_loopback(args.host) and not args.allow_remote:
        p.error(f"--host {args.host} is not loopback: add --allow-remote to serve other machines")
    return args


def _adapters(specs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for spec in specs:
        name, sep, ref = spec.partition("=")
        if not sep or not name or not ref:
            raise InvalidInput(f"--adapter {spec!r}: expected NAME=REF")
        if name in out:
            raise InvalidInput(f"--adapter {name!r} given twice")
        out[name] = ref
    return out


def build(args: argparse.Namespace) -> Served:
    """Materialise and load the model, then start the engine (not yet the HTTP server)."""
    from shipyard.serve.engine import AdapterSet, Engine, EngineConfig, load_causal_lm
    from shipyard.serve.engine.metrics import EngineMetrics

    cache = args.cache_dir or shipyard_home() / "cache" / "models"
    adapter_refs = _adapters(args.adapter)
    ws = Workspace.open()
    try:
        got = materialise(ws, args.model, cache, reader=Reader(service="replica"))
        adapter_ids = {name: ws.resolve(ref) for name, ref in adapter_refs.items()}
    finally:
        ws.close()
    started = time.monotonic()
    loaded = load_causal_lm(got.path, args.threads)
    model, tokenizer = loaded.model, loaded.tokenizer
    load_s = time.monotonic() - started

    def fetcher(artifact_id: str) -> Callable[[], tuple[Path, bool]]:
        def fetch() -> tuple[Path, bool]:
            space = Workspace.open()  # a connection of this thread's own
            try:
                got = materialise(
                    space, artifact_id, cache, kind=ADAPTER_KIND, reader=Reader(service="replica")
                )
                return got.path, got.fetched
            finally:
                space.close()

        return fetch

    metrics = EngineMetrics()
    adapters = AdapterSet(
        model,
        {name: fetcher(aid) for name, aid in adapter_ids.items()},
        args.max_adapters,
        on_load=lambda name, source: metrics.adapter_loads.labels(source).inc(),
    )
    config = EngineConfig(
        max_batch=args.max_batch,
        kv_budget_bytes=int(args.kv_cache_mib * MIB),
        prefix_cache_bytes=int(args.prefix_cache_mib * MIB),
        block_size=args.block_tokens,
        max_queue=args.max_queue,
        prefill_chunk=args.prefill_chunk,
    )
    engine = Engine(model, config, adapters=adapters, metrics=metrics).start()
    load = {
        "materialise_s": round(got.seconds, 3),
        "load_s": round(load_s, 3),
        "fetched": got.fetched,
    }
    return Served(
        engine,
        tokenizer,
        args.served_model_name or args.model,
        args.name or f"replica-{os.getpid()}",
        got.artifact_id,
        loaded.stop_ids,
        args.max_tokens_default,
        {"cold_start": load},
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stopping = threading.Event()
    # SIGTERM: refuse new connections, let the calls already taken finish (up to the drain).
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.set())
    try:
        served = build(args)
    except ShipyardError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    guard = Guard("replica", secrets.token_urlsafe(32), args.host)  # Host and body rules only
    try:
        app = create_app(served, guard, args.keys)
        server = start_server(app, args.host, args.port, "replica-http")
    except ShipyardError as exc:
        served.engine.stop()
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(
        json.dumps({"event": "loaded", "replica": served.replica, **served.info}),
        file=sys.stderr,
        flush=True,
    )
    print(f"listening http://{args.host}:{server.port}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        stopping.wait()
    server.server.should_exit = True  # uvicorn closes its socket, then waits for open calls
    server.thread.join(timeout=args.drain_seconds)
    if server.thread.is_alive():
        print("warning: requests still running at the drain deadline", file=sys.stderr)
    served.engine.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
