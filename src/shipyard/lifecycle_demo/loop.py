"""The demo's training runs with the lifecycle hooks: every checkpoint evaluated on the work
queue, gated against the model the demo's deployment serves, and the newest that passed rolled
out there by canary. The trainer's agent does all of it; this module names the eval task, runs
the training and waits for the rollout's end.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shipyard.errors import ShipyardError
from shipyard.evals.builtin import arithmetic_items
from shipyard.serve.deploy.controller import wait_command
from shipyard.serve.deploy.state import Records
from shipyard.train.config import TrainConfig

ROLLOUT_TIMEOUT_S = 600.0


def demo_task(home: Path, count: int = 24) -> str:
    """A small multiple-choice arithmetic task (the questions of the built-in `arith-mc`) as a
    JSONL task file under `home/demo`: the fast eval of every checkpoint, and the gate's task."""
    path = home / "demo" / "demo-arith.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    header = {"name": "demo-arith", "version": "1", "kind": "mc"}
    lines: list[dict[str, Any]] = [
        {"task": {**header, "template": "Question: {question}\nAnswer:"}}
    ]
    for item in arithmetic_items(count, seed=7):
        lines.append(
            {
                "id": item.id,
                "question": item.fields["question"],
                "choices": list(item.choices),
                "answer": item.target,
                "cluster": item.cluster,
            }
        )
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return f"jsonl:{path}"


@dataclass(frozen=True)
class Outcome:
    run_id: str
    checkpoints: list[str]  # one line per checkpoint: its evals and its gate decision
    passed: int  # checkpoints that passed their gate
    rolled_out: str  # the model artifact promoted on the deployment ("" when none was)
    rollout: str  # how the rollout ended, in words


def train_and_roll_out(cfg: TrainConfig, nprocs: int, say: Callable[[str], None]) -> Outcome:
    """Run `cfg` (naming evals and a deployment) to its end, then wait for the rollout its
    agent handed the deployment, and report each checkpoint's evals and gate."""
    from shipyard.train.controller import Controller  # imports torch: only when training
    from shipyard.train.evalview import lifecycle_view
    from shipyard.train.hooks import check_hooks
    from shipyard.train.report import status
    from shipyard.train.runs import create_run
    from shipyard.train.state import RunTable

    check_hooks(cfg)
    run_id = create_run(cfg, nprocs=nprocs)
    say(f"train     {run_id}: {nprocs} rank(s), {cfg.train.steps} steps")
    state = Controller(run_id, say=lambda line: say(f"train     {line}")).run_to_end()
    table = RunTable()
    try:
        run = table.get(run_id)
        info, view = status(run), lifecycle_view(table, run)
    finally:
        table.close()
    if state != "succeeded":
        raise ShipyardError(f"demo training run {run_id} {state}: {info['reason']}")
    say(f"train     succeeded after {info['failures']} failure(s), goodput {info['goodput']:.0%}")
    rows = view.get("checkpoints", [])
    lines = [_checkpoint_line(row) for row in rows]
    passed = sum(1 for row in rows if (row.get("gate") or {}).get("passed"))
    for line in lines:
        say(f"evals     {line}")
    rollouts = [r for r in view.get("rollouts", []) if r.get("command")]
    if not rollouts:
        errors = [str(r["error"]) for r in view.get("rollouts", []) if r.get("error")]
        return Outcome(
            run_id, lines, passed, "", "; ".join(errors) or "no checkpoint passed its gate"
        )
    last = rollouts[-1]
    result = _wait_rollout(str(last["deployment"]), str(last["command"]), say)
    promoted = str(last["model"]) if result.get("state") == "done" else ""
    say(f"canary    {str(last['model'])[:12]}: {result.get('message', '')}")
    return Outcome(run_id, lines, passed, promoted, str(result.get("message", "")))


def _checkpoint_line(row: dict[str, Any]) -> str:
    scores = ", ".join(
        f"{e['task']} {e['mean']:.3f}" if e["mean"] is not None else f"{e['task']} -"
        for e in row["evals"]
    )
    gate = row.get("gate")
    verdict = "" if not gate else f"; gate {'passed' if gate['passed'] else 'failed'}"
    return f"step {row['step']}: {row.get('error') or scores or 'pending'}{verdict}"


def _wait_rollout(deployment: str, key: str, say: Callable[[str], None]) -> dict[str, Any]:
    seen = {"entries": 0}

    def show(record: dict[str, Any]) -> None:
        history = (record.get("rollout") or {}).get("history", [])
        for entry in history[seen["entries"] :]:
            say(f"canary    stage {entry['stage']:g}%: {entry['outcome']} ({entry['reason']})")
        seen["entries"] = len(history)

    return wait_command(Records(), deployment, key, ROLLOUT_TIMEOUT_S, show)
