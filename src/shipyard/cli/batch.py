"""`shipyard batch ...`: embedding backfills, index builds, the search service and cut-over."""

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from shipyard.cli.argtypes import count, fraction, integer, port, positive
from shipyard.errors import InvalidInput


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    batch = subparsers.add_parser("batch", help="embedding backfills and index cut-over")
    commands = batch.add_subparsers(dest="batch_command", required=True, metavar="COMMAND")

    model = commands.add_parser("import-model", help="store the bundled all-MiniLM-L6-v2")
    model.add_argument("--name", default="all-minilm-l6-v2", help="alias (all-minilm-l6-v2)")
    model.set_defaults(func=_import_model)

    onnx = commands.add_parser("export-onnx", help="export a model to ONNX once, checked")
    onnx.add_argument("model", help="model artifact ref")
    onnx.add_argument("--name", help="alias for the export")
    onnx.add_argument("--int8", action="store_true", help="quantize weights to int8 per channel")
    onnx.set_defaults(func=_export_onnx)

    snap = commands.add_parser("snapshot", help="store a folder of documents as a snapshot")
    snap.add_argument("source", type=Path, help="folder of files (HTML becomes its main text)")
    snap.add_argument("--name", help="alias for the snapshot")
    snap.add_argument("--changes-of", metavar="SNAPSHOT", help="store a change log of SNAPSHOT")
    snap.add_argument(
        "--delete", action="append", default=[], metavar="DOC_ID", help="(change log) a removal"
    )
    snap.set_defaults(func=_snapshot)

    run = commands.add_parser("run", help="plan, queue and run a backfill; prints the job id")
    run.add_argument("--snapshot", required=True, help="snapshot artifact ref")
    run.add_argument("--model", required=True, help="model artifact ref")
    run.add_argument(
        "--runtime",
        choices=("onnx", "onnx-int8", "sentence-transformers"),
        default="onnx",
        help="the encoder's runtime (onnx; onnx-int8 is its own model version)",
    )
    run.add_argument("--max-tokens", type=count, default=128, help="word pieces per chunk (128)")
    run.add_argument("--overlap", type=integer(0), default=16, help="tokens shared by chunks (16)")
    run.add_argument(
        "--token-budget", type=count, default=8192, help="padded tokens a batch (8192)"
    )
    run.add_argument("--shard-minutes", type=positive, default=5.0, help="work per shard (5)")
    run.add_argument("--workers", type=count, default=1, help="worker processes or Ray tasks (1)")
    run.add_argument(
        "--executor", choices=("local", "ray"), default="local", help="worker processes or Ray"
    )
    run.add_argument("--ray-address", help="an existing Ray cluster (default: start one)")
    run.add_argument("--lease", type=positive, default=60.0, help="shard lease seconds (60)")
    run.add_argument("--output", type=Path, help="outputs folder ($SHIPYARD_HOME/batch/outputs)")
    run.set_defaults(func=_run)

    status = commands.add_parser("status", help="progress, ETA and cost of a job")
    status.add_argument("job", help="job id or unique prefix")
    status.add_argument("--json", action="store_true", help="the progress as JSON")
    status.set_defaults(func=_status)

    index = commands.add_parser("index", help="build and measure an index from a finished job")
    index.add_argument("job", help="job id or unique prefix")
    index.add_argument("--changes", help="change log to embed and merge first (catch-up)")
    index.add_argument(
        "--kind", choices=("hnsw", "ivf", "flat"), default="hnsw", help="faiss index type (hnsw)"
    )
    index.add_argument("--ef-search", type=count, default=128, help="HNSW search breadth (128)")
    index.add_argument("--min-recall", type=fraction, default=0.95, help="recorded gate (0.95)")
    index.add_argument("--name", help="alias for the index artifact")
    index.set_defaults(func=_index)

    flip = commands.add_parser("flip", help="point a serving alias at an index, past the gate")
    flip.add_argument("alias", help="the serving alias")
    flip.add_argument("index", help="index artifact ref")
    flip.add_argument("--min-recall", type=fraction, default=0.95, help="the gate (0.95)")
    flip.add_argument("--url", help="a running search-serve: it loads, then swaps")
    flip.set_defaults(func=_flip)

    back = commands.add_parser("rollback", help="point a serving alias back at its last index")
    back.add_argument("alias", help="the serving alias")
    back.add_argument("--url", help="a running search-serve")
    back.set_defaults(func=_rollback)

    serve = commands.add_parser("search-serve", help="answer queries from an alias's index")
    serve.add_argument("alias", help="the serving alias")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (loopback)")
    serve.add_argument("--port", type=port, default=8650, help="0: any free port (8650)")
    serve.add_argument("--min-recall", type=fraction, default=0.95, help="flip gate (0.95)")
    serve.add_argument("--allow-remote", action="store_true", help="allow a non-loopback --host")
    serve.set_defaults(func=_serve)


def _note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _import_model(args: argparse.Namespace) -> int:
    from shipyard.batch import import_minilm
    from shipyard.workspace import Workspace

    print(import_minilm(Workspace.open(), args.name))
    return 0


def _export_onnx(args: argparse.Namespace) -> int:
    from shipyard.batch import export_onnx
    from shipyard.workspace import Workspace

    print(export_onnx(Workspace.open(), args.model, args.name, int8=args.int8))
    return 0


def _snapshot(args: argparse.Namespace) -> int:
    from shipyard.batch import files_of, put_snapshot
    from shipyard.workspace import Workspace

    ws = Workspace.open()
    if args.changes_of:
        rows: Any = [(d, b, "upsert") for d, b in files_of(args.source)]
        rows += [(d, b"", "delete") for d in args.delete]
        print(put_snapshot(ws, rows, args.name, changes=True, of=args.changes_of))
    else:
        if args.delete:
            raise InvalidInput("--delete belongs to a change log (--changes-of SNAPSHOT)")
        print(put_snapshot(ws, files_of(args.source), args.name))
    return 0


def _run(args: argparse.Namespace) -> int:
    from shipyard.batch import ChunkPolicy, EncodeConfig, prepare, run_local, run_ray, submit
    from shipyard.queue import open_queue
    from shipyard.workspace import Workspace

    policy = ChunkPolicy(args.max_tokens, args.overlap)
    config = EncodeConfig(runtime=args.runtime, token_budget=args.token_budget)
    ws = Workspace.open()
    job = prepare(
        ws, args.snapshot, args.model, policy, config, 60 * args.shard_minutes, args.output
    )
    added = submit(open_queue(), job)
    _note(f"job {job.id[:16]}: {len(job.shards)} shards ({added} new) on queue {job.queue}")
    if args.executor == "ray":
        done = run_ray(job, args.workers, args.lease, args.ray_address)
    else:
        done = run_local(job, args.workers, args.lease, report=lambda p: _note(p.line()))
    _note(done.line())
    print(job.id)
    return 0 if done.dead == 0 else 1


def _status(args: argparse.Namespace) -> int:
    from shipyard.batch import load_job, progress
    from shipyard.queue import open_queue

    job = load_job(args.job)
    state = progress(open_queue(), job)
    if args.json:
        print(json.dumps({**state.__dict__, "cpu_s_per_1k_chunks": state.cpu_s_per_1k_chunks}))
    else:
        print(state.line())
    return 0


def _index(args: argparse.Namespace) -> int:
    from shipyard.batch import IndexConfig, build_index, catch_up, load_job
    from shipyard.queue import open_queue
    from shipyard.workspace import Workspace

    ws = Workspace.open()
    job = load_job(args.job)
    config = IndexConfig(kind=args.kind, ef_search=args.ef_search, min_recall=args.min_recall)
    changes = catch_up(ws, open_queue(), job, args.changes) if args.changes else None
    index_id, recall = build_index(ws, job, config, changes, args.name)
    verdict = "passes" if recall >= args.min_recall else "FAILS"
    _note(f"index {index_id[:16]}: recall@10 {recall:.4f} ({verdict} the {args.min_recall} gate)")
    print(index_id)
    return 0


def _flip(args: argparse.Namespace) -> int:
    if args.url:
        return _remote(args.url, "/v1/flip", {"index": args.index})
    from shipyard.batch import flip
    from shipyard.workspace import Workspace

    before = flip(Workspace.open(), args.alias, args.index, args.min_recall)
    _note(f"{args.alias}: {before[:16] or '(new)'} -> {args.index}")
    return 0


def _rollback(args: argparse.Namespace) -> int:
    if args.url:
        return _remote(args.url, "/v1/rollback", {})
    from shipyard.batch import previous_target
    from shipyard.workspace import Workspace

    ws = Workspace.open()
    target = previous_target(ws, args.alias)
    ws.move_alias(args.alias, target)
    _note(f"{args.alias}: back to {target[:16]}")
    return 0


def _remote(url: str, path: str, body: dict[str, Any]) -> int:
    from shipyard.batch.service import SERVICE
    from shipyard.home import shipyard_home
    from shipyard.httpguard import call, read_token

    reply = call(url.rstrip("/") + path, "POST", body, read_token(SERVICE, shipyard_home()))
    print(json.dumps(reply))
    return 0


def _serve(args: argparse.Namespace) -> int:
    from shipyard.batch.service import serve
    from shipyard.home import shipyard_home

    serve(shipyard_home(), args.alias, args.host, args.port, args.min_recall, args.allow_remote)
    return 0
