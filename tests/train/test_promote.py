"""Gate → deploy: a run's checkpoint is judged against the model its deployment serves; one
that fails stays out (and says why), one that passes is rolled out by canary and promoted.

Real parts throughout: a router and replica processes, the deployment's controller loop, the
training controller with its lifecycle agent and eval worker processes."""

import json
from pathlib import Path

import pytest
import torch

from shipyard.checkpoint import CheckpointManager
from shipyard.evals.runner import materialise, warm_engine
from shipyard.evals.tasks import get_task
from shipyard.serve.deploy import replicas as rp
from shipyard.serve.deploy.controller import wait_command
from shipyard.serve.deploy.state import Records
from shipyard.serve.models import put_model_dir
from shipyard.train import Controller, RunTable, TrainConfig, create_run, lifecycle
from shipyard.train.model import GPT
from shipyard.train.worker import checkpoint_root
from shipyard.workspace import Workspace

from ..conftest import run_cli
from ..serve.deploy_support import Running
from .evals_support import gpt_config, gpt_data, mc_task

SPEC = """
name: chat
model: tiny
replicas: {min: 1, max: 1}
autoscale: {interval_s: 3600}
canary: {stages: [50, 100], hold_s: 0.2}
"""


def _own_choices(ws: Workspace, model: str, ref: str) -> list[int]:
    """The model's own pick on each item of the task, as the eval harness scores it: the model
    scores 1 on the task they answer."""
    task = get_task(ref)
    engine = warm_engine(model, materialise(ws, model))
    picks = []
    for item in task.load():
        found = engine.loglikelihoods([(task.render(item), " " + c) for c in item.choices])
        picks.append(max(range(len(found)), key=lambda i: found[i].logprob))
    return picks


def _train(cfg: TrainConfig) -> tuple[str, RunTable]:
    run_id = create_run(cfg, 1)
    assert Controller(run_id, say=print).run_to_end() == "succeeded"
    return run_id, RunTable()


@pytest.mark.slow
@pytest.mark.timeout(900)  # a loaded machine: every process here imports torch
def test_a_failing_checkpoint_stays_out_and_a_passing_one_is_rolled_out(
    shipyard_home: Path, workspace: Workspace, tiny_llama_dirs, tmp_path: Path
) -> None:
    tiny = put_model_dir(workspace, tiny_llama_dirs(0), "tiny", source="test:tiny-llama")
    data = gpt_data(workspace, tmp_path)
    ref = mc_task(tmp_path / "own.jsonl", n=16)
    ref = mc_task(tmp_path / "own.jsonl", _own_choices(workspace, tiny.id, ref), n=16)
    router = rp.start_router(shipyard_home)
    running = Running(SPEC, router.url, shipyard_home)
    try:
        # The deployed model answers every item as the task does; a random GPT cannot. Its
        # checkpoint was committed with no controller running: the agent alone judges it.
        train = {"steps": 10}
        strict = gpt_config(data, train=train, evals={"fast": [ref]}, deploy={"deployment": "chat"})
        run_id = create_run(strict, 1)
        table = RunTable()
        run = table.get(run_id)
        manager = CheckpointManager(checkpoint_root(run.run_dir), peer_memory=False)
        torch.manual_seed(0)
        manager.save(10, {"model": GPT(strict.model).state_dict(), "optim": {}})
        manager.close()
        run.state = "succeeded"
        table.save(run)
        assert lifecycle.main([run_id]) == 0
        (gate,) = [e.detail for e in table.events(run_id, "gate")]
        assert gate["passed"] is False and gate["baseline"] == tiny.id and "own" in gate["reason"]
        assert table.events(run_id, "rollout") == []
        assert workspace.catalog.get_alias("tiny") == tiny.id
        text = run_cli("train", "status", run_id).stdout
        assert "gate failed: " in text and "rollout" not in text
        table.close()

        # A trained one, with room for a drop of 1, passes and is rolled out; its controller
        # returns once the agent is done with it.
        deploy = {"deployment": "chat", "max_drop": 1.0}
        lenient = gpt_config(data, train=train, evals={"fast": [ref]}, deploy=deploy)
        run_id, table = _train(lenient)
        (gate,) = [e.detail for e in table.events(run_id, "gate")]
        candidate = gate["model"]
        assert gate["passed"] is True and gate["baseline"] == tiny.id
        report = workspace.catalog.get_artifact(gate["report"])
        assert report is not None and report.kind == "eval-report"
        parents = {e.parent for e in workspace.catalog.lineage(gate["report"], "up")}
        assert {candidate, tiny.id} <= parents  # lineage: model → its gate report
        (rollout,) = [e.detail for e in table.events(run_id, "rollout")]
        assert rollout["model"] == candidate and "error" not in rollout
        records = Records(shipyard_home)
        done = wait_command(records, "chat", rollout["command"], 600, lambda record: None)
        assert done["exit_code"] == 0, done
        assert workspace.catalog.get_alias("tiny") == candidate  # moved by CAS at promotion
        assert running.ctrl is not None and running.ctrl.current == candidate[:12]
        shown = json.loads(run_cli("train", "status", run_id, "--json").stdout)
        assert shown["checkpoints"][0]["gate"]["passed"] is True
        assert shown["rollouts"][0]["state"] == "done"
        table.close()
    finally:
        running.close()
        rp.stop(router)
