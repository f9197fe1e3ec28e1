"""The console's run page shows, per checkpoint step, its eval scores (mean ± SE, or pending),
its gate decision and rollout, and the regression alert over consecutive checkpoints.

The results are stored as eval workers store them (a queue completion whose effect writes the
score), and the run's lifecycle events as its agent records them; no model runs here."""

from pathlib import Path

import numpy as np
from fastapi.testclient import TestClient

from shipyard.evals.runner import plan
from shipyard.loader import TokenDatasetWriter
from shipyard.queue import open_queue
from shipyard.train import RunTable, TrainConfig, create_run

from ..train.evals_support import answer_all, mc_task


def test_run_page_shows_scores_pending_gate_rollout_and_alert(
    client: TestClient, home: Path, tmp_path: Path
) -> None:
    ref = mc_task(tmp_path / "parity.jsonl", n=4)
    with TokenDatasetWriter(tmp_path / "tokens", 300, shard_tokens=10_000) as writer:
        writer.add(np.arange(200) % 300)
    cfg = TrainConfig.from_dict(
        {"data": {"path": str(tmp_path / "tokens")}, "model": {"vocab_size": 300},
         "evals": {"fast": [ref]}}
    )  # fmt: skip
    run_id = create_run(cfg, 1)
    table, queue = RunTable(), open_queue()
    try:
        for step, right in ((10, True), (20, False), (30, False), (40, None)):
            model = f"{step:064x}"
            plan(queue, model, [ref])
            if right is not None:
                answer_all(queue, model, ref, right)
            table.event(run_id, "checkpoint-published", step=step, checkpoint=f"c{step}")
            table.event(run_id, "evals-enqueued", step=step, checkpoint=f"c{step}", model=model,
                        tasks=[ref])  # fmt: skip
        table.event(run_id, "checkpoint-published", step=50, checkpoint="c50")
        table.event(run_id, "evals-failed", step=50, checkpoint="c50", error="no such tensor")
        table.event(run_id, "gate", step=30, model=f"{30:064x}", baseline="b", passed=False,
                    reason="parity: worse by 1.000", report="", verdicts={})  # fmt: skip
        table.event(run_id, "rollout", step=10, model=f"{10:064x}", deployment="chat",
                    error="no deployment named 'chat'")  # fmt: skip
    finally:
        queue.close()
        table.close()

    page = client.get(f"/runs/{run_id}")
    assert page.status_code == 200, page.text
    html = page.text
    rows = html.split('<table id="checkpoints">')[1].split("</table>")[0].split("<tr>")[2:]
    assert [r.split("<td>")[1].split("</td>")[0] for r in rows] == ["10", "20", "30", "40", "50"]
    assert "parity\n1.000" in rows[0] and "parity\n0.000" in rows[1]
    assert "pending (0/4)" in rows[3] and "no such tensor" in rows[4]
    assert "failed: parity: worse by 1.000" in rows[2]
    assert 'id="alert"' in html and "regression: two consecutive checkpoints" in html
    assert "rollout of step 10 to chat" in html and "no deployment named" in html
