"""`shipyard scheduler serve|simulate` and `shipyard job submit|cancel|status`.

The job commands talk to the running service over its HTTP API (`--url`, default
`$SHIPYARD_SCHEDULER_URL` or http://127.0.0.1:8642), sending the token the service wrote under
`$SHIPYARD_HOME`; with no service answering they exit 6 naming the URL.
"""

import argparse
import json
import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

from shipyard.cli.argtypes import count, number, port, positive, seed
from shipyard.errors import InvalidInput, StorageError
from shipyard.scheduler.model import PRIORITY_CLASSES, TOPOLOGY_MODES

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
DEFAULT_URL = "http://127.0.0.1:8642"


def duration(text: str) -> float:
    """`90`, `90s`, `30m`, `2h` or `1d` → seconds."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd]?)", text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"bad duration {text!r} (use e.g. 90s, 30m, 2h, 1d)")
    return float(match[1]) * _UNITS[match[2] or "s"]


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    sched = subparsers.add_parser(
        "scheduler", help="run or simulate the multi-tenant GPU scheduler"
    )
    commands = sched.add_subparsers(dest="scheduler_command", required=True, metavar="COMMAND")
    serve = commands.add_parser("serve", help="run the scheduler service with the local backend")
    serve.add_argument("--config", type=Path, required=True, help="cluster JSON: nodes, teams")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback)")
    serve.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a --host other than loopback (the token still guards every change)",
    )
    serve.add_argument("--port", type=port, default=8642, help="TCP port (default 8642)")
    serve.add_argument("--tick", type=positive, default=0.5, help="seconds between passes")
    serve.add_argument("--logs", type=Path, help="job logs (default: $SHIPYARD_HOME/jobs)")
    serve.add_argument(
        "--backend", choices=("local", "slurm"), default="local", help="where jobs run"
    )
    serve.add_argument("--slurm-conf", type=Path, help="slurm.conf for the Slurm tools")
    serve.add_argument("--partition", help="Slurm partition to submit to")
    serve.set_defaults(func=_serve)
    sim = commands.add_parser("simulate", help="replay a Philly-format trace through the policy")
    sim.add_argument("--trace", type=Path, required=True, help="Philly-format trace CSV")
    sim.add_argument("--vcs", type=Path, help="VC node counts (default: philly_vc.csv beside it)")
    sim.add_argument(
        "--policy",
        default="shipyard",
        help="shipyard (pooled, quotas, shortest limit first, reclaim); slurm-pooled (FIFO + "
        "EASY on one pooled partition); slurm (FIFO + EASY, one partition per VC); fifo, sjf "
        "(the Helios check: per VC, strict, true durations)",
    )
    sim.add_argument(
        "--load-factor", type=positive, default=1.0, help="divide inter-arrival times by this"
    )
    sim.add_argument(
        "--overestimate",
        type=number(1.0),
        default=4.0,
        help="time limits are the true duration × U, U log-uniform on [1, this] (default 4)",
    )
    sim.add_argument("--seed", type=seed, default=0, help="seed of the time-limit draws")
    sim.add_argument("--json", action="store_true", help="print the whole report as JSON")
    sim.add_argument(
        "--fragmentation-csv",
        type=Path,
        help="write free GPUs and their scattered fraction per simulated hour to this CSV",
    )
    sim.set_defaults(func=_simulate)

    job = subparsers.add_parser("job", help="submit, cancel and inspect scheduler jobs")
    jobs = job.add_subparsers(dest="job_command", required=True, metavar="COMMAND")
    service = argparse.ArgumentParser(add_help=False)
    service.add_argument(
        "--url",
        default=os.environ.get("SHIPYARD_SCHEDULER_URL", DEFAULT_URL),
        help=f"the scheduler service (default $SHIPYARD_SCHEDULER_URL or {DEFAULT_URL})",
    )
    submit = jobs.add_parser(
        "submit", parents=[service], help="queue a gang: shipyard job submit ... -- CMD"
    )
    submit.add_argument("--team", required=True, help="team whose quota the job uses")
    submit.add_argument("--gpus", type=count, required=True, help="GPUs for the whole gang")
    submit.add_argument("--gpus-per-node", type=count, help="GPUs on every node of the gang")
    submit.add_argument("--gpu-type", default="gpu", help="GPU type (default gpu)")
    classes = ", ".join(PRIORITY_CLASSES)
    submit.add_argument("--priority", default="normal", help=f"class (default ones: {classes})")
    submit.add_argument(
        "--time-limit", type=duration, required=True, help="stopped after this (e.g. 2h)"
    )
    submit.add_argument("--preemptible", action="store_true", help="may be preempted")
    submit.add_argument(
        "--grace", type=duration, default=30.0, help="SIGTERM to SIGKILL (default 30s)"
    )
    submit.add_argument(
        "--checkpoint-interval", type=duration, default=0.0, help="how often the job checkpoints"
    )
    submit.add_argument(
        "--topology", default="any", choices=TOPOLOGY_MODES, help="where the gang may land"
    )
    submit.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    submit.set_defaults(func=_submit)
    cancel = jobs.add_parser("cancel", parents=[service], help="cancel a queued or running job")
    cancel.add_argument("id", help="job id")
    cancel.set_defaults(func=_cancel)
    status = jobs.add_parser(
        "status", parents=[service], help="one job as JSON, or a table of all jobs"
    )
    status.add_argument("id", nargs="?", help="job id (default: every job)")
    status.set_defaults(func=_status)


def _serve(args: argparse.Namespace) -> int:
    from shipyard.scheduler.backend import Backend
    from shipyard.scheduler.config import load_config
    from shipyard.scheduler.local import LocalBackend
    from shipyard.scheduler.serve import serve
    from shipyard.scheduler.slurm import SlurmBackend
    from shipyard.scheduler.store import JobStore
    from shipyard.workspace import shipyard_home

    config = load_config(args.config)
    home = shipyard_home()
    logs = args.logs or home / "jobs"
    backend: Backend = LocalBackend(config.nodes, logs)
    if args.backend == "slurm":
        backend = SlurmBackend(config.nodes, logs, args.slurm_conf, args.partition)
    serve(
        config,
        JobStore(),
        backend,
        home,
        host=args.host,
        port=args.port,
        tick=args.tick,
        allow_remote=args.allow_remote,
    )
    return 0


def _simulate(args: argparse.Namespace) -> int:
    from shipyard.scheduler.experiments import simulate_trace
    from shipyard.scheduler.trace import LimitModel, load_philly, load_vc_sizes

    trace = load_philly(args.trace, load_factor=args.load_factor)
    vcs = load_vc_sizes(args.vcs or args.trace.with_name("philly_vc.csv"))
    limits = LimitModel(overestimate=args.overestimate, seed=args.seed)
    report = simulate_trace(trace, vcs, args.policy, limits)
    if args.fragmentation_csv:
        rows = [f"{h},{free},{frac:.4f}\n" for h, free, frac in report.fragmentation_series]
        try:
            with open(args.fragmentation_csv, "w") as out:
                out.write("hour,free_gpus,scattered_fraction\n" + "".join(rows))
        except OSError as exc:
            raise StorageError(
                f"--fragmentation-csv {args.fragmentation_csv}: cannot write ({exc.strerror})"
            ) from None
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
        return 0
    print(f"policy {args.policy}, load factor {args.load_factor:g}: {report.jobs} jobs")
    print(f"  avg JCT {report.avg_jct:.0f} s, p99 JCT {report.p99_jct:.0f} s")
    print(f"  avg queueing delay {report.avg_queue_delay:.0f} s")
    print(f"  utilization {report.utilization:.3f} (allocated {report.allocated_utilization:.3f})")
    print(f"  busy {report.busy_fraction:.3f} of the GPUs from first to last submission")
    print(f"  preemptions {report.preemptions}, lost {report.lost_gpu_hours:.1f} GPU-hours")
    print(f"  fairness (Jain over team slowdowns) {report.jain_fairness:.3f}")
    frag = report.fragmentation
    print(
        f"  fragmentation: {frag['avg_free_gpus']:.0f} free GPUs on average, "
        f"{frag['avg_scattered_fraction']:.1%} of them outside wholly free nodes"
    )
    return 0


def _submit(args: argparse.Namespace) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise InvalidInput("job submit: give the command after --")
    spec = {
        "team": args.team,
        "gpus": args.gpus,
        "time_limit": args.time_limit,
        "gpus_per_node": args.gpus_per_node,
        "gpu_type": args.gpu_type,
        "priority": args.priority,
        "preemptible": args.preemptible,
        "grace": args.grace,
        "checkpoint_interval": args.checkpoint_interval,
        "topology": args.topology,
        "command": command,
    }
    print(_call(args.url, "/jobs", "POST", spec)["id"])
    return 0


def _cancel(args: argparse.Namespace) -> int:
    reply = _call(args.url, f"/jobs/{quote(args.id, safe='')}", "DELETE")
    print(f"{reply['id']} {reply['state']}")
    return 0


def _status(args: argparse.Namespace) -> int:
    if args.id:
        print(json.dumps(_call(args.url, f"/jobs/{quote(args.id, safe='')}"), indent=2))
        return 0
    for row in _call(args.url, "/jobs"):
        spec = row["spec"]
        what = f"{spec['team']:<10} {spec['gpus']:>4} GPUs"
        notes = [row["message"]] if row["message"] else []
        condition = row.get("condition")
        if row["state"] == "queued" and condition:
            notes.append(f"{condition['reason']}: {condition['message']}")
        print(f"{row['id']}  {row['state']:<10} {what}  {'; '.join(notes)}")
    return 0


def _call(url: str, path: str, method: str = "GET", body: Any = None) -> Any:
    """One request to the service, with the token its first start wrote (job reads need it)."""
    from shipyard.httpguard import call, read_token
    from shipyard.workspace import shipyard_home

    try:
        token = read_token("scheduler", shipyard_home())
    except StorageError as exc:
        raise StorageError(f"scheduler at {url}: {exc}") from None
    return call(url.rstrip("/") + path, method, body, token)
