"""`shipyard eval ...`: run, work, inspect, compare and guard evaluations of models."""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from shipyard import children
from shipyard.cli.argtypes import count, fraction, positive
from shipyard.errors import InvalidInput, ShipyardError
from shipyard.home import shipyard_home

Parser = argparse.ArgumentParser


def register(subparsers: "argparse._SubParsersAction[Parser]") -> None:
    evals = subparsers.add_parser("eval", help="evaluate models: tasks, runs, reports, alerts")
    commands = evals.add_subparsers(dest="eval_command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="enqueue a model's tasks and work them")
    run.add_argument("model", help="model artifact (id, prefix or alias)")
    run.add_argument("--tasks", required=True, help="comma-separated task names or jsonl:PATH")
    run.add_argument("--limit", type=count, help="the first N items of each task")
    run.add_argument("--workers", type=count, default=1, help="worker processes (1: this one)")
    run.add_argument("--enqueue-only", action="store_true", help="enqueue; let workers run it")
    run.add_argument("--report", action="store_true", help="store the report as an artifact")
    run.add_argument("--name", help="alias for the report artifact")
    _worker_options(run)
    run.set_defaults(func=_run)

    worker = commands.add_parser("worker", help="work one model's queue until it is empty")
    worker.add_argument("model", help="model artifact")
    _worker_options(worker)
    worker.set_defaults(func=_worker)

    status = commands.add_parser("status", help="runs, their progress and queue counts")
    status.add_argument("model", nargs="?", help="only this model")
    status.set_defaults(func=_status)

    report = commands.add_parser("report", help="a model's scores (mean ± SE) as JSON")
    report.add_argument("model", help="model artifact")
    report.add_argument("--put", action="store_true", help="store it as an eval-report artifact")
    report.add_argument("--name", help="alias for the stored report")
    report.set_defaults(func=_report)

    cmp = commands.add_parser("compare", help="paired differences between two models")
    cmp.add_argument("a", help="model artifact")
    cmp.add_argument("b", help="model artifact (the reference)")
    cmp.add_argument("--task", help="only this task (a name, or jsonl:PATH)")
    cmp.set_defaults(func=_compare)

    alert = commands.add_parser("alert", help="exit 1 if two consecutive checkpoints regressed")
    alert.add_argument("baseline", help="baseline model artifact")
    alert.add_argument("checkpoints", nargs="+", help="model artifacts, oldest first")
    alert.add_argument("--task", required=True, help="the task to compare on (or jsonl:PATH)")
    alert.add_argument("--k", type=positive, default=2.0, help="paired standard errors (2)")
    alert.set_defaults(func=_alert)

    rescore = commands.add_parser("rescore", help="score stored outputs with the current judge")
    rescore.add_argument("model", help="model artifact")
    rescore.add_argument("--task", required=True, help="task name")
    rescore.set_defaults(func=_rescore)

    tasks = commands.add_parser("tasks", help="the registered tasks")
    tasks.set_defaults(func=_tasks)

    watch = commands.add_parser("watch", help="evaluate every model an alias points at")
    watch.add_argument("alias", help="the alias to follow")
    watch.add_argument("--fast", default="arith-mc", help="fast-tier tasks, comma-separated")
    watch.add_argument(
        "--full",
        default="arith-mc,arith-gen,rg-basic-arithmetic,humaneval",
        help="full-tier tasks, comma-separated",
    )
    watch.add_argument("--every", type=count, default=5, help="full tier on every Nth model (5)")
    watch.add_argument("--interval", type=positive, default=5.0, help="seconds between polls")
    watch.add_argument("--tokenizer", type=Path, help="for an alias of trainer checkpoints")
    watch.add_argument("--n-heads", type=count, help="checkpoints' attention heads, if unrecorded")
    watch.set_defaults(func=_watch)

    canary = commands.add_parser("canary", help="re-run the reference model if the harness moved")
    canary.add_argument("--baseline", type=Path, help="baseline file (in SHIPYARD_HOME/evals)")
    canary.add_argument("--record", metavar="MODEL", help="record a new baseline with MODEL")
    canary.add_argument("--tasks", default="arith-mc", help="tasks to record (with --record)")
    canary.add_argument("--force", action="store_true", help="re-run even if nothing changed")
    canary.set_defaults(func=_canary)

    contam = commands.add_parser("contamination", help="tasks whose items overlap a corpus")
    contam.add_argument("corpus", type=Path, help="a .jsonl (text field) or text file, or a dir")
    contam.add_argument("--tasks", help="comma-separated tasks (default: every registered one)")
    contam.add_argument("--n", type=count, default=13, help="word n-gram length (13)")
    contam.add_argument("--threshold", type=fraction, default=0.01, help="flag at this fraction")
    contam.add_argument("--export", type=Path, help="also write the decontam benchmark file")
    contam.set_defaults(func=_contamination)


def _worker_options(parser: Parser) -> None:
    parser.add_argument("--batch", type=count, default=16, help="items per claim and batch (16)")
    parser.add_argument("--lease", type=positive, default=120.0, help="lease seconds (120)")


def _open() -> tuple[Any, Any]:
    from shipyard.queue import open_queue
    from shipyard.workspace import Workspace

    return Workspace.open(), open_queue()


def _refs(text: str) -> list[str]:
    refs = [r.strip() for r in text.split(",") if r.strip()]
    if not refs:
        raise InvalidInput("--tasks: name at least one task")
    return refs


def _run(args: argparse.Namespace) -> int:
    from shipyard.evals import model_report, plan, put_report, work
    from shipyard.evals.store import ResultStore

    if args.workers < 1 or args.batch < 1:
        raise InvalidInput("--workers and --batch must be at least 1")
    ws, queue = _open()
    model = ws.resolve(args.model)
    for p in plan(queue, model, _refs(args.tasks), args.limit):
        print(
            f"{p.task}: {p.items} items, {p.enqueued} enqueued (run {p.run_key})", file=sys.stderr
        )
    if args.enqueue_only:
        return 0
    if args.workers == 1:
        work(queue, ws, model, args.batch, args.lease, note=_progress)
    else:
        _spawn(model, args.workers, args.batch, args.lease)
    report = model_report(ResultStore(queue.db), model)
    for line in report["runs"]:
        print(_line(line))
    if args.report:
        print(put_report(ws, report, args.name))
    return 0


def _progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _spawn(model: str, workers: int, batch: int, lease: float) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    argv = [sys.executable, "-m", "shipyard.evals.worker", model]
    argv += ["--batch", str(batch), "--lease", str(lease)]
    procs = [children.spawn(argv, env=env, stdout=subprocess.DEVNULL) for _ in range(workers)]
    try:
        failed = [p.wait() for p in procs]
    finally:  # a Ctrl-C here ends them too (a SIGKILL: the kernel and the keeper do)
        for proc in procs:
            children.stop(proc)
    if any(failed):
        raise ShipyardError(f"eval workers exited with {failed}")


def _line(run: dict[str, Any]) -> str:
    def number(value: float | None) -> str:
        return "-" if value is None else f"{value:.4f}"

    dead = f"  dead={run['dead']}" if run.get("dead") else ""
    return (
        f"{run['task']:<24} {number(run['mean'])} ± {number(run['se'])}  "
        f"n={run['scored']}/{run['items']}{dead}  {json.dumps(run['outcomes'])}"
    )


def _worker(args: argparse.Namespace) -> int:
    from shipyard.evals import work

    ws, queue = _open()
    stats = work(queue, ws, ws.resolve(args.model), args.batch, args.lease, note=_progress)
    print(json.dumps(stats.__dict__))
    return 0


def _status(args: argparse.Namespace) -> int:
    from shipyard.evals import queue_name
    from shipyard.evals.store import ResultStore

    ws, queue = _open()
    store = ResultStore(queue.db)
    model = ws.resolve(args.model) if args.model else None
    for run in store.runs(model):
        done = len(store.done_items(run["run_key"]))
        print(f"{run['model_id'][:16]} {run['task']:<24} {done}/{run['items']} done")
    for name in sorted({queue_name(r["model_id"]) for r in store.runs(model)}):
        (s,) = queue.stats(name)
        print(f"queue {name}: ready {s.ready}, leased {s.leased}, done {s.done}, dead {s.dead}")
    return 0


def _report(args: argparse.Namespace) -> int:
    from shipyard.evals import model_report, put_report
    from shipyard.evals.store import ResultStore

    ws, queue = _open()
    report = model_report(ResultStore(queue.db), ws.resolve(args.model))
    if args.put:
        print(put_report(ws, report, args.name))
    else:
        print(json.dumps(report, indent=2, sort_keys=True))
    return 0


def _pairs(store: Any, a: str, b: str, task: str | None) -> list[tuple[str, str]]:
    """Runs of `a` and `b` with the same key but the model (optionally of one task)."""
    b_runs = store.runs(b)
    pairs = []
    for run in store.runs(a):
        for other in b_runs:
            fields = ("task", "task_version", "template_hash", "fewshot_hash", "sampling")
            same = all(run[f] == other[f] for f in (*fields, "harness_version"))
            if same and (task is None or run["task"] == task):
                pairs.append((run["run_key"], other["run_key"]))
    if not pairs:
        raise InvalidInput("the two models have no runs with the same key to compare")
    return pairs


def _compare(args: argparse.Namespace) -> int:
    from shipyard.evals import compare
    from shipyard.evals.store import ResultStore

    ws, queue = _open()
    store = ResultStore(queue.db)
    task = _task_name(args.task) if args.task else None
    for run_a, run_b in _pairs(store, ws.resolve(args.a), ws.resolve(args.b), task):
        print(json.dumps(compare(store, run_a, run_b), sort_keys=True))
    return 0


def _alert(args: argparse.Namespace) -> int:
    from shipyard.evals import regression_alert
    from shipyard.evals.report import run_scores
    from shipyard.evals.store import ResultStore

    ws, queue = _open()
    store = ResultStore(queue.db)
    task = _task_name(args.task)
    base = ws.resolve(args.baseline)
    series, theirs = [], ""
    for ref in args.checkpoints:
        model = ws.resolve(ref)
        mine, theirs = _pairs(store, model, base, task)[-1]  # the latest comparable run
        series.append((model, run_scores(store, store.run(mine)).by_item))
    baseline = run_scores(store, store.run(theirs))
    # the same clustered paired difference as `eval compare`: each checkpoint against the base
    alert = regression_alert(baseline.by_item, series, k=args.k, clusters=baseline.clusters)
    if alert is None:
        print("no regression")
        return 0
    print(alert.message())
    return 1


def _task_name(ref: str) -> str:
    """The name runs are stored under: a task's name, or a JSONL file's task's name."""
    if not ref.startswith("jsonl:"):
        return ref
    from shipyard.evals import get_task

    return get_task(f"jsonl:{Path(ref[6:]).resolve()}").name


def _rescore(args: argparse.Namespace) -> int:
    from shipyard.evals import get_task, judge_version
    from shipyard.evals.store import ResultStore

    ws, queue = _open()
    store = ResultStore(queue.db)
    task = get_task(args.task)
    runs = [r for r in store.runs(ws.resolve(args.model)) if r["task"] == task.name]
    for run in runs:
        added = store.rescore(task, run["run_key"])
        print(f"{run['run_key']}: {added} items scored under {judge_version(task)}")
    return 0


def _tasks(args: argparse.Namespace) -> int:
    from shipyard.evals import registered

    for task in registered():
        print(f"{task.name:<24} {task.kind:<5} v{task.version:<14} {len(task.load())} items")
    return 0


def _watch(args: argparse.Namespace) -> int:
    from shipyard.evals import TriggerPolicy, watch

    policy = TriggerPolicy(_refs_tuple(args.fast), _refs_tuple(args.full), args.every)
    ws, queue = _open()
    watch(
        ws, queue, args.alias, policy, args.interval, tokenizer=args.tokenizer, n_heads=args.n_heads
    )
    return 0


def _refs_tuple(text: str) -> tuple[str, ...]:
    return tuple(_refs(text))


def _canary(args: argparse.Namespace) -> int:
    from shipyard.evals import canary, work

    ws, queue = _open()
    path = args.baseline or shipyard_home() / "evals" / "canary.json"

    def run_reference(model: str) -> None:
        work(queue, ws, model)

    if args.record:
        scores = canary.record(
            queue, ws.resolve(args.record), _refs(args.tasks), run_reference, path
        )
        print(f"recorded {path}: {json.dumps(scores, sort_keys=True)}")
        return 0
    result = canary.check(queue, path, run_reference, force=args.force)
    print(
        ("re-ran: scores held " if result.ran else "nothing changed: ") + json.dumps(result.scores)
    )
    return 0


def _contamination(args: argparse.Namespace) -> int:
    from shipyard.evals import ContaminationIndex, export_benchmarks, get_task, registered
    from shipyard.evals.contamination import read_corpus

    tasks = [get_task(t) for t in _refs(args.tasks)] if args.tasks else registered()
    if args.export:
        export_benchmarks(tasks, args.export)
    flagged = 0
    for line in ContaminationIndex(tasks, args.n).check(read_corpus(args.corpus), args.threshold):
        flagged += line["flagged"]
        print(json.dumps(line, sort_keys=True))
    print(f"{flagged} of {len(tasks)} tasks flagged", file=sys.stderr)
    return 0
