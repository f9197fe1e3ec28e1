"""Canaries end to end: real router, real replica processes, a real controller loop, and the
eval gate on the eval platform (the work queue, eval worker processes, the result store).

The gate's task is multiple choice, each item's answer the current version's own best choice; a
version with noise added to its weights picks otherwise and is rolled back by the gate, the alias
unmoved; a good one is promoted and the alias moves; an alias moved by someone else makes the CAS
fail safely.
"""

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from shipyard.evals import ResultStore, plan, work
from shipyard.httpguard.apikeys import hash_key, new_key
from shipyard.queue import open_queue
from shipyard.serve.deploy.controller import wait_command
from shipyard.serve.deploy.state import Records
from shipyard.serve.models import put_model_dir
from shipyard.workspace import Workspace

from ..conftest import run_cli
from .deploy_support import Running, cli, complete, perturbed, router_fixture  # noqa: F401

PROMPTS = [f"Item {n}: the answer is" for n in range(20)]
CHOICES = ["yes", "no", "maybe", "never"]
KEY = new_key()


def write_gate_task(workspace: Workspace, model_id: str, path: Path) -> Path:
    """A JSONL multiple-choice task whose answers are `model_id`'s own best choices, as the eval
    platform scores them (a draft with every answer 0 is run on it first), and the model's run
    of it, done: the rollouts' gates evaluate only their candidates."""

    def write(answers: list[int]) -> None:
        lines = [json.dumps({"task": {"name": "canary-gate", "kind": "mc"}})]
        for n, (prompt, answer) in enumerate(zip(PROMPTS, answers, strict=True)):
            item = {"id": f"q{n}", "question": prompt, "choices": CHOICES, "answer": answer}
            lines.append(json.dumps(item))
        path.write_text("\n".join(lines) + "\n")

    write([0] * len(PROMPTS))
    queue = open_queue()
    try:
        (planned,) = plan(queue, model_id, [f"jsonl:{path}"])
        work(queue, workspace, model_id)
        outputs = ResultStore(queue.db).outputs(planned.run_key)
        logprobs = [outputs[f"q{n}"]["logprobs"] for n in range(len(PROMPTS))]
        write([max(range(len(CHOICES)), key=lambda i: lp[i]) for lp in logprobs])
        plan(queue, model_id, [f"jsonl:{path}"])
        work(queue, workspace, model_id)
    finally:
        queue.close()
    return path


def test_canary_rolls_back_a_broken_version_and_promotes_a_good_one(
    shipyard_home: Path, workspace: Workspace, tiny_model: Any, router: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    broken = put_model_dir(
        workspace, perturbed(tiny_model.path, tmp_path / "broken", 0.5), None, source="test:noisy"
    )
    good = put_model_dir(
        workspace, perturbed(tiny_model.path, tmp_path / "good", 1e-5), None, source="test:good"
    )
    gate_task = write_gate_task(workspace, tiny_model.id, tmp_path / "gate.jsonl")
    spec = f"""
name: chat
model: tiny
replicas: {{min: 1, max: 2}}
autoscale: {{interval_s: 3600}}
canary: {{stages: [1, 5, 25, 100], hold_s: 0.2}}
eval_gate: {{tasks: ['jsonl:{gate_task}']}}
api_keys: ["{hash_key(KEY)}"]
"""
    running = Running(spec, router, shipyard_home)
    try:
        ctrl = running.ctrl
        assert ctrl is not None
        current_pid = ctrl.replicas[ctrl.current][0].pid
        # The spec's API keys hold at the router and at the replicas the controller starts
        assert complete(router, PROMPTS[0]).status_code == 401
        replica_url = ctrl.replicas[ctrl.current][0].url
        assert complete(replica_url, PROMPTS[0]).status_code == 401
        answers = []  # what the version in production answers now, through the router
        for prompt in PROMPTS[:2]:
            reply = complete(router, prompt, key=KEY)
            assert reply.status_code == 200, reply.text
            answers.append(reply.json()["choices"][0]["text"])

        assert cli("rollout", "chat", "--to", broken.id) == 1
        out = capsys.readouterr().out
        assert "stage 1%: fail (eval gate: candidate worse" in out and "rolled_back" in out
        assert "canary-gate" in out
        assert workspace.catalog.get_alias("tiny") == tiny_model.id  # the alias did not move
        assert ctrl.replicas[ctrl.current][0].pid == current_pid  # stayed warm throughout
        assert broken.id[:12] not in ctrl.replicas  # the candidate's replicas are gone
        logs = shipyard_home / "serve/logs"
        assert (logs / f"eval-{broken.id[:12]}.log").exists()  # an eval worker for it ran
        assert not (logs / f"eval-{tiny_model.id[:12]}.log").exists()  # evaluated before
        assert complete(router, PROMPTS[0], key=KEY).json()["choices"][0]["text"] == answers[0]
        # The gate's runs are the eval platform's: in its store, as `shipyard eval report` shows
        queue = open_queue()
        try:
            store = ResultStore(queue.db)
            for model in (tiny_model.id, broken.id):
                run = store.runs(model)[-1]
                assert run["task"] == "canary-gate" and run["items"] == len(PROMPTS)
        finally:
            queue.close()

        assert cli("rollout", "chat", "--to", good.id) == 0
        out = capsys.readouterr().out
        assert [line.split(":")[0] for line in out.splitlines() if line.startswith("stage")] == [
            "stage 1%", "stage 5%", "stage 25%",
        ]  # fmt: skip
        assert workspace.catalog.get_alias("tiny") == good.id  # moved, by CAS, at 100%
        assert ctrl.current == good.id[:12] and ctrl.previous == tiny_model.id[:12]
        stats = httpx.get(f"{router}/v1/models", timeout=10)
        assert stats.status_code == 200

        assert cli("status", "chat") == 0
        out = capsys.readouterr().out
        assert f"{good.id[:16]} current" in out and f"{tiny_model.id[:16]} previous" in out

        # Back to the warm previous version: the alias moves back by CAS too
        assert cli("rollback", "chat") == 0
        assert workspace.catalog.get_alias("tiny") == tiny_model.id
        assert ctrl.current == tiny_model.id[:12]

        # Someone moves the alias meanwhile: the promotion's CAS fails, nothing is overwritten
        workspace.move_alias("tiny", broken.id)
        assert cli("rollout", "chat", "--to", good.id) == 3
        assert "moved concurrently" in capsys.readouterr().out
        assert workspace.catalog.get_alias("tiny") == broken.id
        assert ctrl.current == tiny_model.id[:12]
        assert complete(router, PROMPTS[1], key=KEY).json()["choices"][0]["text"] == answers[1]

        # Two rollouts asked at once: the second is refused while the first runs
        records = Records(shipyard_home)
        keys = ["9000000000.000001-a", "9000000000.000002-b"]

        def ask_twice(record: dict[str, Any]) -> None:
            for key in keys:
                record["commands"][key] = {"op": "rollout", "to": good.id, "state": "pending"}

        records.update("chat", ask_twice)
        second = wait_command(records, "chat", keys[1], 60, lambda record: None)
        assert second["exit_code"] == 3 and "already running" in second["message"]
        first = wait_command(records, "chat", keys[0], 120, lambda record: None)
        assert first["exit_code"] == 3  # the alias still points elsewhere: its CAS fails again

        decisions = [
            json.loads(line)
            for line in (shipyard_home / "serve/deployments/chat.decisions.jsonl").open()
        ]
        canary = [d for d in decisions if d["kind"] == "canary"]
        assert {"begin", "fail", "pass", "promote", "rollback", "cas-failed"} <= {
            d["action"] for d in canary
        }
        failed = next(d for d in canary if d["action"] == "fail")
        (verdict,) = failed["inputs"]["eval"]["verdicts"]
        assert verdict["baseline"]["mean"] == 1.0 and verdict["candidate"]["mean"] < 1.0
        assert verdict["delta"]["n"] == len(PROMPTS) and not verdict["passed"]
        passed = next(d for d in canary if d["action"] == "pass")
        assert passed["inputs"]["eval"]["passed"]

        # A gate task gone since the spec was read refuses the rollout, naming it: exit 2
        gate_task.unlink()
        assert cli("rollout", "chat", "--to", broken.id) == 2
        out = capsys.readouterr().out
        assert f"eval_gate.tasks: {gate_task}: cannot read the task file" in out
        assert broken.id[:12] not in ctrl.replicas
    finally:
        running.close()
    assert json.loads((shipyard_home / "serve/deployments/chat.json").read_text())["status"] == (
        "stopped"
    )


def test_deploy_refuses_an_unknown_gate_task_by_name(shipyard_home: Path, tmp_path: Path) -> None:
    spec = tmp_path / "chat.yaml"
    spec.write_text("name: chat\nmodel: tiny\neval_gate: {tasks: [arith-mc, arith-mcq]}\n")
    result = run_cli("serve", "deploy", str(spec))
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: {spec}: eval_gate.tasks 'arith-mcq': no eval task")
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr
    assert not (shipyard_home / "serve/deployments/chat.json").exists()
