"""`shipyard train run|attach|status|report`: fault-tolerant training runs."""

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

from shipyard.cli.argtypes import count, positive


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    train = subparsers.add_parser("train", help="run and inspect fault-tolerant training runs")
    commands = train.add_subparsers(dest="train_command", required=True, metavar="COMMAND")
    run = commands.add_parser("run", help="start a run from a TOML/JSON config and drive it")
    run.add_argument("config", type=Path, help="the run config, TOML or JSON (docs/train.md)")
    run.add_argument("--nprocs", type=count, required=True, help="ranks (data-parallel world size)")
    run.add_argument("--chaos", type=positive, metavar="MTBF_S", help="inject random faults")
    run.add_argument("--alias", help="move this alias to the model artifact on success")
    run.set_defaults(func=_run)
    attach = commands.add_parser("attach", help="re-attach a controller to a run (after a crash)")
    attach.add_argument("run", help="run id")
    attach.set_defaults(func=_attach)
    for name, helptext, func in (
        ("status", "a run's state, step, failures and goodput", _status),
        ("report", "goodput breakdown, Young/Daly interval, failures, hangs, stragglers", _report),
    ):
        sub = commands.add_parser(name, help=helptext)
        sub.add_argument("run", help="run id")
        sub.add_argument("--json", action="store_true", help="print the whole thing as JSON")
        sub.set_defaults(func=func)


def _say(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


def _run(args: argparse.Namespace) -> int:
    from shipyard.train import Controller, create_run, load_config
    from shipyard.train.hooks import check_hooks

    cfg = load_config(args.config)
    if args.chaos is not None:
        cfg = dataclasses.replace(cfg, chaos=dataclasses.replace(cfg.chaos, mtbf_s=args.chaos))
    if args.alias:
        cfg = dataclasses.replace(cfg, alias=args.alias)
    check_hooks(cfg)  # an unknown eval task or deployment: refused before anything starts
    run_id = create_run(cfg, args.nprocs)
    print(f"run {run_id}", flush=True)
    state = Controller(run_id, say=_say).run_to_end()
    return _summary(run_id, state)


def _attach(args: argparse.Namespace) -> int:
    from shipyard.train import Controller

    state = Controller(args.run, attach=True, say=_say).run_to_end()
    return _summary(args.run, state)


def _summary(run_id: str, state: str) -> int:
    from shipyard.train import RunTable, status

    table = RunTable()
    try:
        info = status(table.get(run_id))
    finally:
        table.close()
    print(
        f"{state}: {info['step']}/{info['steps']} steps, {info['failures']} failures, "
        f"goodput {info['goodput']:.1%}"
        + (f", model {info['model'][:16]}" if info["model"] else "")
    )
    return 0 if state == "succeeded" else 1


def _status(args: argparse.Namespace) -> int:
    from shipyard.train import RunTable, status
    from shipyard.train.evalview import lifecycle_view

    table = RunTable()
    try:
        run = table.get(args.run)
        info = {**status(run), **lifecycle_view(table, run)}
    finally:
        table.close()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    for key in ("run", "state", "reason", "world_size", "attempt", "step", "steps"):
        if info[key] != "":
            print(f"{key:16} {info[key]}")
    print(f"{'checkpoint_step':16} {info['checkpoint_step']}")
    print(f"{'failures':16} {info['failures']}")
    print(f"{'goodput':16} {info['goodput']:.1%} of {info['wall_s']:.1f}s")
    if info["skips"]:
        print(f"{'skip windows':16} {info['skips']}")
    if info["model"]:
        print(f"{'model':16} {info['model']}")
    _print_lifecycle(info)
    return 0


def _print_lifecycle(info: dict[str, Any]) -> None:
    """Per checkpoint step: eval scores, the gate's decision; then alerts and rollouts."""
    for row in info.get("checkpoints", []):
        what = row.get("error") or ", ".join(_score(line) for line in row["evals"]) or "pending"
        print(f"{'checkpoint ' + str(row['step']):16} {what}")
        gate = row["gate"]
        if gate:
            verdict = "passed" if gate["passed"] else "failed"
            print(f"{'':16} gate {verdict}: {gate['reason']}")
    for alert in info.get("alerts", []):
        print(f"{'ALERT':16} {alert}")
    for rollout in info.get("rollouts", []):
        state = rollout.get("error") or rollout.get("state", "")
        live = rollout.get("rollout")
        if live:
            state += f", canary {live['status']}" + (
                f" ({live['reason']})" if live["reason"] else ""
            )
        print(
            f"{'rollout':16} step {rollout['step']} → {rollout['deployment']}: "
            f"{str(rollout['model'])[:16]} {state}"
        )


def _score(line: dict[str, Any]) -> str:
    if line["pending"]:
        return f"{line['task']} pending ({line['scored']}/{line['total']})"
    if line["mean"] is None:
        return f"{line['task']} -"
    se = "" if line["se"] is None else f" ± {line['se']:.3f}"
    return f"{line['task']} {line['mean']:.3f}{se}"


def _report(args: argparse.Namespace) -> int:
    from shipyard.train import RunTable, report

    table = RunTable()
    try:
        info = report(table.get(args.run), table)
    finally:
        table.close()
    if args.json:
        print(json.dumps(info, indent=2, default=str))
        return 0
    _print_report(info)
    return 0


def _print_report(info: dict[str, Any]) -> None:
    out = sys.stdout
    out.write(f"run {info['run']}: {info['state']} at step {info['step']}/{info['steps']}\n")
    wall = info["breakdown"]["wall"] or 1.0
    out.write(f"goodput {info['goodput']:.1%} of {wall:.1f}s wall\n")
    for bucket, seconds in info["breakdown"].items():
        if bucket not in ("wall", "goodput"):
            out.write(f"  {bucket:17} {seconds:9.2f}s  {seconds / wall:6.1%}\n")
    ckpt = info["checkpoint"]
    source = "observed" if ckpt["mtbf_observed"] else "prior"
    out.write(
        f"checkpoint stall C {ckpt['stall_s']:.3f}s, MTBF M {ckpt['mtbf_s']:.1f}s ({source}), "
        f"Young/Daly τ* = √(2CM) = {ckpt['young_daly_s']:.2f}s, "
        f"model goodput at τ* {ckpt['model_goodput_at_tau']:.1%}\n"
    )
    out.write(f"failures {info['failures_by_kind'] or 'none'}")
    out.write(f", mean restart {info['mean_restart_s']:.2f}s\n")
    for hang in info["hangs"]:
        out.write(
            f"  hang: {hang['stalled_s']:.2f}s without progress (threshold "
            f"{hang['threshold_s']:.2f}s); rank(s) {hang['missing']} never entered "
            f"collective {hang['pending']}\n"
        )
    for straggler in info["stragglers"]:
        out.write(
            f"  straggler: rank {straggler['rank']} at {straggler['ratio']:.2f}× its peers "
            f"(window {straggler['window']})\n"
        )
    for rollback in info["rollbacks"]:
        out.write(f"  rollback to step {rollback['to_step']}, skipped {rollback['skip']}\n")
    out.write(f"per-rank step times (heatmap data): {info['step_times_csv']}\n")
