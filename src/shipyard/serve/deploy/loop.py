"""The controller's loop: every tick, replace the dead, run commands, then canary or autoscale;
every `autoscale.interval_s`, probe the replicas' health first."""

import math
import threading
import time

from shipyard.errors import ShipyardError
from shipyard.serve.deploy import rollout as canary
from shipyard.serve.deploy.controller import Controller
from shipyard.serve.deploy.scaling import autoscale

TICK_S = 0.25  # how often commands and a running canary are looked at


def tick(ctrl: Controller) -> None:
    if ctrl.reap():
        ctrl.last_change = time.monotonic()  # the cool-downs and the idle clock start again
    for key, command in ctrl.take_commands():
        try:
            if command.get("op") == "rollout":
                canary.begin(ctrl, str(command.get("to", "")))
                ctrl.rollout_command = key  # finished when the rollout ends
                continue
            if command.get("op") == "rollback":
                message = canary.rollback(ctrl)
                if ctrl.rollout_command:
                    _finish_rollout(ctrl)
                ctrl.finish_command(key, True, message)
            else:
                ctrl.finish_command(key, False, f"unknown command {command.get('op')!r}", 2)
        except ShipyardError as exc:
            ctrl.finish_command(key, False, str(exc), exc.exit_code)
    now = time.monotonic()
    due = now - ctrl.scaling.get("last_tick", -math.inf) >= ctrl.spec.autoscale.interval_s
    if due:
        ctrl.scaling["last_tick"] = now
        ctrl.probe()
    if ctrl.rollout and ctrl.rollout.status == "running":
        canary.advance(ctrl)
        if ctrl.rollout.status != "running":
            _finish_rollout(ctrl)
    elif ctrl.spec.engine.kind == "transformers" and due:
        autoscale(ctrl, now)
    ctrl.save()


def _finish_rollout(ctrl: Controller) -> None:
    ctrl.save()  # the rollout's last stage is in the record before its command reads as done
    key, ctrl.rollout_command = ctrl.rollout_command, None
    rollout = ctrl.rollout
    if rollout is None:
        return
    ctrl.events["shipyard_serve_deploy_rollouts_total", rollout.status] += 1
    if key is None:
        return
    promoted = rollout.status == "promoted"
    cas_failed = canary.CAS_LOST in rollout.reason
    code = 0 if promoted else 3 if cas_failed else 1
    message = f"{rollout.status}: {rollout.reason}"
    ctrl.finish_command(key, promoted, message, code)


def run(ctrl: Controller, stop: threading.Event) -> None:
    """Tick until `stop` is set; a failed tick is logged and retried on the next one."""
    while not stop.is_set():
        try:
            tick(ctrl)
        except ShipyardError as exc:
            ctrl.records.log(ctrl.spec.name, {"kind": "error", "error": str(exc)})
        stop.wait(TICK_S)
