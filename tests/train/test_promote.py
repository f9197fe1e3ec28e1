"""Gate → deploy: a run's checkpoint is judged against the model its deployment serves; one
that fails stays out (and says why), one that passes is rolled out by canary and promoted.

Real parts: a router and replica processes, the deployment's controller loop, the training
controller with its lifecycle agent and eval worker processes. Only the deployed model's and the
failing candidate's scores are stored without running a model (as a worker stores them), so the
gate's verdict on them is certain."""

from pathlib import Path

import pytest

from shipyard.evals.runner import plan
from shipyard.queue import open_queue
from shipyard.serve.deploy import replicas as rp
from shipyard.serve.deploy.controller import wait_command
from shipyard.serve.deploy.state import Records
from shipyard.serve.models import put_model_dir
from shipyard.train import Controller, RunTable, TrainConfig, create_run
from shipyard.train.evalview import lifecycle_view
from shipyard.train.promote import judge_ready, roll_out
from shipyard.workspace import Workspace

from ..conftest import run_cli
from ..serve.deploy_support import Running
from .evals_support import answer_all, gpt_config, gpt_data, mc_task

SPEC = """
name: chat
model: tiny
replicas: {min: 1, max: 1}
autoscale: {interval_s: 3600}
canary: {stages: [50, 100], hold_s: 0.2}
"""


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
    ref = mc_task(tmp_path / "parity.jsonl", n=16)
    queue = open_queue()
    plan(queue, tiny.id, [ref])
    answer_all(queue, tiny.id, ref, right=True)  # the deployed model's stored results: all right
    router = rp.start_router(shipyard_home)
    running = Running(SPEC, router.url, shipyard_home)
    try:
        # A checkpoint whose model got every item wrong fails the gate against it, and says
        # why; nothing is rolled out.
        train = {"steps": 10}
        strict = gpt_config(data, train=train, evals={"fast": [ref]}, deploy={"deployment": "chat"})
        run_id = create_run(strict, 1)
        table = RunTable()
        wrong = f"{1:064x}"
        plan(queue, wrong, [ref])
        answer_all(queue, wrong, ref, right=False)
        table.event(run_id, "evals-enqueued", step=10, checkpoint="c", model=wrong, tasks=[ref])
        run = table.get(run_id)
        assert judge_ready(workspace, queue, table, run, set()) == 1
        assert roll_out(table, run)
        (gate,) = [e.detail for e in table.events(run_id, "gate")]
        assert gate["passed"] is False and gate["baseline"] == tiny.id
        assert "candidate worse" in gate["reason"] and "parity" in gate["reason"]
        assert table.events(run_id, "rollout") == [] and gate["report"] == ""
        assert workspace.catalog.get_alias("tiny") == tiny.id
        text = run_cli("train", "status", run_id).stdout
        assert "gate failed: candidate worse" in text and "rollout" not in text
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
        shown = lifecycle_view(table, table.get(run_id))  # what status and the run page show
        assert shown["checkpoints"][0]["gate"]["passed"] is True
        assert shown["rollouts"][0]["state"] == "done"
        table.close()
    finally:
        queue.close()
        running.close()
        rp.stop(router)
