"""Every committed checkpoint of a run whose config names evals is published, imported and
evaluated on the work queue, exactly once per checkpoint, whoever was running when it was
committed; a config naming an unknown task or deployment is refused before a run starts."""

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from shipyard.checkpoint import CheckpointManager
from shipyard.errors import InvalidInput
from shipyard.evals.runner import queue_name
from shipyard.evals.triggers import trigger_commit
from shipyard.loader import TokenDatasetWriter
from shipyard.queue import open_queue
from shipyard.train import RunTable, create_run, lifecycle
from shipyard.train.evalhook import policy
from shipyard.train.evalview import lifecycle_view
from shipyard.train.hooks import check_hooks, source
from shipyard.train.model import GPT
from shipyard.train.worker import checkpoint_root
from shipyard.workspace import Workspace

from .evals_support import gpt_config, gpt_data, mc_task


def test_unknown_tasks_and_deployments_are_refused_before_a_run_starts(
    shipyard_home: Path, workspace: Workspace, tmp_path: Path, cli: Callable[..., Any]
) -> None:
    data = gpt_data(workspace, tmp_path)
    task = mc_task(tmp_path / "parity.jsonl")
    with TokenDatasetWriter(tmp_path / "bare", 300, shard_tokens=10_000) as writer:
        writer.add(np.arange(100) % 300)
    bare = workspace.put(tmp_path / "bare", "dataset").id  # no tokenizer in its lineage
    cases = [
        ({"evals": {"fast": ["no-such-task"]}}, data, "'evals.fast': eval task 'no-such-task'"),
        ({"evals": {"fast": [task], "full": ["jsonl:/nowhere.jsonl"]}}, data, "/nowhere.jsonl"),
        (
            {"evals": {"fast": [task]}, "deploy": {"deployment": "nowhere"}},
            data,
            "'deploy.deployment': no deployment named 'nowhere'",
        ),
        ({"evals": {"fast": [task]}}, bare, "has no tokenizer"),
    ]
    for sections, dataset, named in cases:
        with pytest.raises(InvalidInput, match=re.escape(named)):
            check_hooks(gpt_config(dataset, **sections))
    # the command refuses it (exit 2, one line) before a run is created
    config = tmp_path / "run.json"
    config.write_text(json.dumps(gpt_config(data, **cases[0][0]).to_dict()))
    done = cli("train", "run", str(config), "--nprocs", "1")
    assert done.returncode == 2, done.stdout + done.stderr
    assert cases[0][2] in done.stderr and "Traceback" not in done.stderr
    table = RunTable()
    try:
        assert table.db.rows("SELECT COUNT(*) FROM train_runs")[0][0] == 0  # nothing started
    finally:
        table.close()


def test_checkpoints_committed_with_no_agent_running_are_evaluated_once(
    shipyard_home: Path, workspace: Workspace, tmp_path: Path, cli: Callable[..., Any]
) -> None:
    data = gpt_data(workspace, tmp_path)
    fast, full = mc_task(tmp_path / "parity.jsonl"), mc_task(tmp_path / "full.jsonl", n=6)
    cfg = gpt_config(data, evals={"fast": [fast], "full": [full], "full_every": 2})
    run_id = create_run(cfg, 1)
    table = RunTable()
    run = table.get(run_id)
    # Two checkpoints committed while no controller (so no agent) ran, then the run ended.
    manager = CheckpointManager(checkpoint_root(run.run_dir), peer_memory=False)
    torch.manual_seed(0)
    for step in (10, 20):
        manager.save(step, {"model": GPT(cfg.model).state_dict(), "optim": {}})
    manager.close()
    run.state = "succeeded"
    table.save(run)

    assert lifecycle.main([run_id]) == 0  # what a controller coming back starts
    enqueued = [e.detail for e in table.events(run_id, "evals-enqueued")]
    assert [(d["step"], len(d["tasks"])) for d in enqueued] == [(10, 1), (20, 2)]  # 2nd: full
    models = [d["model"] for d in enqueued]
    assert len(set(models)) == 2
    view = lifecycle_view(table, table.get(run_id))
    rows = view["checkpoints"]
    assert [r["step"] for r in rows] == [10, 20]
    for row in rows:
        assert row["evals"] and all(
            not e["pending"] and e["mean"] is not None for e in row["evals"]
        )
        assert {e["scored"] for e in row["evals"]} <= {12, 6}
    # Lineage: each model comes from its checkpoint, which the run made from the dataset.
    for detail in enqueued:
        up = {e.parent for e in workspace.catalog.lineage(detail["model"], "up")}
        assert detail["checkpoint"] in up and data in up

    # Again (an agent after a crash, a re-attached controller): nothing new is enqueued.
    queue = open_queue()
    try:
        before = [queue.stats(queue_name(m))[0] for m in models]
        events_before = len(table.events(run_id))
        assert lifecycle.main([run_id]) == 0
        assert len(table.events(run_id)) == events_before
        again = trigger_commit(queue, workspace, policy(cfg), enqueued[1]["checkpoint"], Path(
            run.run_dir) / "tokenizer", source(run_id), cfg.model.n_heads)  # fmt: skip
        assert again.model_id == models[1] and again.tasks == enqueued[1]["tasks"]
        assert [p.enqueued for p in again.planned] == [0, 0]
        after = [queue.stats(queue_name(m))[0] for m in models]
        assert [(s.done, s.ready, s.dead) for s in after] == [(b.done, 0, 0) for b in before]
        triggers = queue.db.rows("SELECT COUNT(*) FROM eval_triggers WHERE source = ?", (
            source(run_id),))  # fmt: skip
        assert triggers[0][0] == 2
    finally:
        queue.close()
        table.close()

    text = cli("train", "status", run_id)
    assert text.returncode == 0, text.stderr
    lines = [line for line in text.stdout.splitlines() if line.startswith("checkpoint ")]
    assert len(lines) == 2 and "parity" in lines[0] and " ± " in lines[0]
    assert "full" in lines[1]
    shown = json.loads(cli("train", "status", run_id, "--json").stdout)
    assert [r["step"] for r in shown["checkpoints"]] == [10, 20]
