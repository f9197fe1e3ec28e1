"""`shipyard eval ...` through its argument parser, and the harness canary."""

import argparse
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from shipyard.cli import evals as cli
from shipyard.evals import CanaryMoved, canary, work
from shipyard.evals import scoring as scoring_module
from shipyard.evals import store as store_module
from shipyard.queue import Queue
from shipyard.workspace import Workspace


def shipyard(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="shipyard")
    cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


def test_run_status_report_compare_and_alert(
    put_tiny: Callable[[int], str], capsys: pytest.CaptureFixture[str], workspace: Workspace
) -> None:
    a, b = put_tiny(0), put_tiny(1)
    workspace.move_alias("ckpt-a", a)
    assert shipyard("eval", "run", "ckpt-a", "--tasks", "arith-mc", "--limit", "8") == 0
    assert shipyard("eval", "run", b, "--tasks", "arith-mc", "--limit", "8", "--report") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("arith-mc") and "n=8/8" in out[0]
    report_id = out[-1]
    assert workspace.catalog.get_artifact(report_id).kind == "eval-report"  # type: ignore[union-attr]
    assert shipyard("eval", "status") == 0
    status = capsys.readouterr().out
    assert "8/8 done" in status and "done 8" in status
    assert shipyard("eval", "report", "ckpt-a") == 0
    assert json.loads(capsys.readouterr().out)["runs"][0]["scored"] == 8
    assert shipyard("eval", "compare", "ckpt-a", b) == 0
    diff = json.loads(capsys.readouterr().out)
    assert diff["task"] == "arith-mc" and diff["difference"]["n"] == 8
    code = shipyard("eval", "alert", b, "ckpt-a", "ckpt-a", "--task", "arith-mc")
    said = capsys.readouterr().out
    assert (code == 1) == said.startswith("regression")


def test_canary_skips_when_nothing_changed_and_blocks_a_moved_score(
    queue: Queue,
    workspace: Workspace,
    put_tiny: Callable[[int], str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reference = put_tiny(0)
    path = tmp_path / "canary.json"

    def run(model: str) -> None:
        work(queue, workspace, model)

    recorded = canary.record(queue, reference, ["arith-mc"], run, path)
    assert not canary.check(queue, path, run).ran  # nothing changed: nothing re-run
    # a new judge version with the same verdicts re-runs (re-scores) and holds
    monkeypatch.setitem(scoring_module.JUDGE_VERSIONS, "mc", "2")
    held = canary.check(queue, path, run)
    assert held.ran and held.scores == recorded
    # a judge whose verdicts moved blocks the change

    def inverted(task: Any, item: Any, output: dict[str, Any]) -> scoring_module.Score:
        right = scoring_module.score(task, item, output)
        return scoring_module.Score(1.0 - right.value, right.outcome)

    monkeypatch.setitem(scoring_module.JUDGE_VERSIONS, "mc", "3")
    monkeypatch.setattr(store_module, "score", inverted)
    with pytest.raises(CanaryMoved, match="arith-mc"):
        canary.check(queue, path, run)


def test_alert_and_compare_on_a_jsonl_task_share_one_clustered_error(
    put_tiny: Callable[[int], str],
    queue: Queue,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Scores planted for a JSONL task of 12 items in 3 clusters: two checkpoints miss all of
    cluster c0. The paired difference is -1/3 with clustered SE 1/3, so a 2-SE alert stays
    quiet, by the task's name or its path, and `eval compare` reports the same SE."""
    from shipyard.evals import ResultStore, get_task, judge_version, plan
    from shipyard.evals.scoring import Score

    path = tmp_path / "gk.jsonl"
    lines = [json.dumps({"task": {"name": "gk-mc", "template": "Q: {question}\nA:"}})]
    for n in range(12):
        item = {"id": f"q{n}", "question": f"{n}?", "choices": ["a", "b"], "answer": 0}
        lines.append(json.dumps({**item, "cluster": f"c{n % 3}"}))
    path.write_text("\n".join(lines) + "\n")
    task = get_task(f"jsonl:{path}")
    store = ResultStore(queue.db)
    base, one, two = put_tiny(0), put_tiny(1), put_tiny(2)
    for model, dips in ((base, False), (one, True), (two, True)):
        (run,) = plan(queue, model, [f"jsonl:{path}"])
        with queue.db.transaction():
            for item in task.load():
                value = 0.0 if dips and item.cluster == "c0" else 1.0
                result = Score(value, "correct" if value else "wrong")
                store.record(
                    queue.db, run.run_key, judge_version(task), item.id, item.cluster, {}, result
                )
    for ref in ("gk-mc", f"jsonl:{path}"):
        assert shipyard("eval", "alert", base, one, two, "--task", ref, "--k", "2") == 0
        assert capsys.readouterr().out.strip() == "no regression"
    assert shipyard("eval", "compare", one, base, "--task", "gk-mc") == 0
    diff = json.loads(capsys.readouterr().out)["difference"]
    assert diff["mean"] == pytest.approx(-1 / 3) and diff["se"] == pytest.approx(1 / 3)
    assert diff["clusters"] == 3
    assert shipyard("eval", "alert", base, one, two, "--task", "gk-mc", "--k", "0.9") == 1
    assert "(SE 0.3333)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("option", "code", "message"),
    [
        (("--export", "/proc/nope/x.jsonl"), 2, "/proc/nope/x.jsonl: cannot write the benchmark"),
        (("--threshold", "nan"), 2, "argument --threshold: expected a finite number"),
        (("--threshold", "2"), 2, "argument --threshold: expected a finite number"),
    ],
)
def test_contamination_refuses_a_bad_export_path_or_threshold(
    shipyard_home: Path, tmp_path: Path, option: tuple[str, str], code: int, message: str
) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("nothing from any benchmark here\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "shipyard",
            "eval",
            "contamination",
            str(corpus),
            "--tasks",
            "arith-mc",
            *option,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == code, result.stderr
    assert message in result.stderr.strip().splitlines()[-1]  # one line says what and where
    assert "Traceback" not in result.stderr and "bug" not in result.stderr
