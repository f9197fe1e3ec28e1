"""`shipyard queue create|put|ls|show|stats|dead|requeue|worker`: the leased work queue."""

import argparse
import datetime
import json
import sys
from dataclasses import asdict

from shipyard.cli.argtypes import count, integer, row_id, seconds
from shipyard.errors import InvalidInput
from shipyard.queue import ItemRecord, Queue, open_queue
from shipyard.queue.model import MAX_ATTEMPTS, PRIORITY_RANGE, STATES, parse_json
from shipyard.queue.worker import Worker, WorkerConfig

ATTEMPTS = integer(1, MAX_ATTEMPTS)
PRIORITY = integer(*PRIORITY_RANGE)
LIMIT = integer(1, 100_000)


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    queue = subparsers.add_parser("queue", help="leased work queues on the database (SHIPYARD_DB)")
    commands = queue.add_subparsers(dest="queue_command", required=True, metavar="COMMAND")

    create = commands.add_parser("create", help="create a queue (a no-op if it exists alike)")
    create.add_argument("queue", help="queue name: letters, digits, '_.:-'")
    create.add_argument(
        "--max-attempts", type=ATTEMPTS, default=3, help="claims per item before it is dead (3)"
    )
    create.set_defaults(func=_create)

    put = commands.add_parser("put", help="add an item; prints its id")
    put.add_argument("queue", help="the queue")
    put.add_argument("payload", help="the payload as JSON, or - for one JSON value per stdin line")
    put.add_argument("--key", help="idempotency key: an item with this key is added only once")
    put.add_argument("--priority", type=PRIORITY, default=0, help="higher is claimed first (0)")
    put.add_argument("--delay", type=seconds, default=0.0, help="seconds before it is claimable")
    put.add_argument("--max-attempts", type=ATTEMPTS, help="override the queue's max attempts")
    put.set_defaults(func=_put)

    ls = commands.add_parser("ls", help="list a queue's items, oldest first")
    ls.add_argument("queue", help="the queue")
    ls.add_argument("--state", choices=STATES, help="only items in this state")
    ls.add_argument("--limit", type=LIMIT, default=100, help="at most this many items (100)")
    ls.add_argument("--json", action="store_true", help="one JSON object per line")
    ls.set_defaults(func=_ls)

    show = commands.add_parser("show", help="one item with the history of its attempts")
    show.add_argument("item", type=row_id, help="the item's id")
    show.add_argument("--json", action="store_true", help="print it as JSON")
    show.set_defaults(func=_show)

    stats = commands.add_parser("stats", help="per-queue counts, or Prometheus metrics")
    stats.add_argument("queue", nargs="?", help="one queue (default: all)")
    stats.add_argument("--prometheus", action="store_true", help="print the Prometheus text format")
    stats.add_argument("--json", action="store_true", help="one JSON object per queue")
    stats.set_defaults(func=_stats)

    dead = commands.add_parser("dead", help="dead-lettered items and why each attempt ended")
    dead.add_argument("queue", help="the queue")
    dead.add_argument("--limit", type=LIMIT, default=100, help="at most this many items (100)")
    dead.add_argument("--json", action="store_true", help="one JSON object per line")
    dead.set_defaults(func=_dead)

    requeue = commands.add_parser("requeue", help="make dead items claimable again")
    requeue.add_argument("queue", help="the queue")
    requeue.add_argument("items", nargs="*", type=row_id, help="item ids (default: every dead one)")
    requeue.set_defaults(func=_requeue)

    worker = commands.add_parser(
        "worker",
        help="run a command per item: shipyard queue worker QUEUE [OPTIONS] -- CMD ARGS",
    )
    worker.add_argument("queue", help="the queue to work")
    _worker_options(worker)
    worker.add_argument(
        "command", nargs=argparse.REMAINDER, help="[OPTIONS] -- the command and its arguments"
    )
    worker.set_defaults(func=_worker)


def _worker_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lease", type=seconds, default=60.0, help="lease seconds, renewed (60)")
    parser.add_argument(
        "--payload-env",
        action="store_true",
        help="pass the payload in $SHIPYARD_PAYLOAD instead of on stdin",
    )
    parser.add_argument("--max-items", type=count, help="stop after completing this many")
    parser.add_argument("--until-empty", action="store_true", help="stop when none is claimable")
    parser.add_argument(
        "--grace",
        type=seconds,
        default=30.0,
        help="after SIGTERM, seconds a running command may finish before its item is released",
    )


# Options given after QUEUE arrive in the command's REMAINDER (argparse stops at the first
# positional that takes the rest): this parser reads them, up to the `--`.
_LATE_OPTIONS = argparse.ArgumentParser(prog="shipyard queue worker QUEUE", add_help=False)
_worker_options(_LATE_OPTIONS)


def _create(args: argparse.Namespace) -> int:
    made = open_queue().create(args.queue, args.max_attempts)
    print(f"queue {args.queue}: {'created' if made else 'exists'}", file=sys.stderr)
    return 0


def _put(args: argparse.Namespace) -> int:
    queue = open_queue()
    if args.payload == "-":
        if args.key is not None:
            raise InvalidInput("queue put -: --key names one item; give each line its own put")
        payloads = [
            parse_json(line, f"stdin line {n}")
            for n, line in enumerate(sys.stdin, 1)
            if line.strip()
        ]
        keys = None
    else:
        payloads = [parse_json(args.payload, "payload")]
        keys = None if args.key is None else [args.key]
    added = queue.enqueue_many(
        args.queue,
        payloads,
        keys=keys,
        priority=args.priority,
        delay=args.delay,
        max_attempts=args.max_attempts,
    )
    for item_id, new in added:
        if not new:
            print(f"item {item_id} was already queued under that key", file=sys.stderr)
        print(item_id)
    return 0


def _ls(args: argparse.Namespace) -> int:
    for record in open_queue().items(args.queue, args.state, args.limit):
        print(_json(record) if args.json else _line(record))
    return 0


def _show(args: argparse.Namespace) -> int:
    record = open_queue().get(args.item)
    print(json.dumps(asdict(record), indent=2) if args.json else _detail(record))
    return 0


def _stats(args: argparse.Namespace) -> int:
    stats = open_queue().stats(args.queue)
    if args.prometheus:
        from shipyard.queue.metrics import render  # prometheus_client, only when asked for

        sys.stdout.write(render(stats))
        return 0
    for s in stats:
        if args.json:
            print(json.dumps(asdict(s)))
        else:
            print(
                f"{s.queue}  ready {s.ready}  delayed {s.waiting}  leased {s.leased}  "
                f"done {s.done}  dead {s.dead}  oldest ready {s.oldest_ready_age:.1f} s  "
                f"claims {s.claims}  completions {s.completions}"
            )
    return 0


def _dead(args: argparse.Namespace) -> int:
    for record in open_queue().dead(args.queue, args.limit):
        print(_json(record) if args.json else _detail(record))
    return 0


def _requeue(args: argparse.Namespace) -> int:
    moved = open_queue().requeue(args.queue, args.items or None)
    print(f"{moved} item(s) requeued", file=sys.stderr)
    return 0


def _worker(args: argparse.Namespace) -> int:
    # argparse drops a `--` right after QUEUE; one after options is still here.
    rest = args.command
    split = rest.index("--") if "--" in rest else -1
    if split < 0 and rest[:1] and rest[0].startswith("-"):
        raise InvalidInput("queue worker: a command is required after --")
    _LATE_OPTIONS.parse_args(rest[: max(split, 0)], namespace=args)
    config = WorkerConfig(
        args.queue,
        rest[split + 1 :],
        lease=args.lease,
        payload_via="env" if args.payload_env else "stdin",
        max_items=args.max_items,
        until_empty=args.until_empty,
        grace=args.grace,
    )

    def connect() -> Queue:
        queue = open_queue()
        queue.stats(args.queue)  # an unknown queue is refused now, not at the first claim
        return queue

    worker = Worker(connect, config)
    worker.install_signal_handlers()
    done = worker.run()
    print(f"queue worker: {done} item(s) completed", file=sys.stderr)
    return 0


def _when(at: float | None) -> str:
    return "-" if at is None else datetime.datetime.fromtimestamp(at).isoformat(timespec="seconds")


def _line(r: ItemRecord) -> str:
    return (
        f"{r.id}  {r.state:6}  attempts {r.attempts}/{r.max_attempts}  priority {r.priority}  "
        f"key {r.key}  payload {json.dumps(r.payload)[:60]}"
    )


def _detail(r: ItemRecord) -> str:
    lines = [_line(r)]
    if r.state == "done":
        lines.append(f"  result {json.dumps(r.result)[:200]}")
    for a in r.history:
        ended = f"{a.outcome} at {_when(a.ended_at)}" if a.outcome else "leased"
        why = f": {a.reason}" if a.reason else ""
        lines.append(
            f"  attempt {a.attempt} (token {a.token}) by {a.owner} at {_when(a.claimed_at)}, "
            f"{ended}{why}"
        )
    return "\n".join(lines)


def _json(r: ItemRecord) -> str:
    return json.dumps(asdict(r))
