"""`shipyard rl run CONFIG`: the report it prints and writes; a bad config exits 2 by name;
the metrics endpoint."""

import argparse
import json
from pathlib import Path

import httpx
import pytest

from shipyard.cli import rl as rl_cli
from shipyard.errors import InvalidInput
from shipyard.rl import Controller, RLConfig
from shipyard.rl.report import serve_metrics

CONFIG = """
name: cli-run
task: {heldout: 4}
model: {vocab_size: 98, d_model: 32, n_layers: 1, n_heads: 2, seq_len: 32}
warmup: {steps: 10, batch: 8}
rollout: {workers: 1, group_size: 2, prompts_per_step: 2, max_new_tokens: 6}
trainer: {steps: 2, eta: 1}
"""


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="shipyard")
    rl_cli.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_rl_run_prints_and_writes_the_report(
    shipyard_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "rl.yaml"
    config.write_text(CONFIG)
    args = _parse(["rl", "run", str(config), "--report", str(tmp_path / "report.json")])
    assert args.func(args) == 0
    printed = json.loads(capsys.readouterr().out)
    written = json.loads((tmp_path / "report.json").read_text())
    assert printed == written
    assert printed["versions"] == 2 and printed["eta"] == 1
    for key in (
        "reward",
        "heldout_accuracy",
        "staleness_histogram",
        "tokens_per_s",
        "weight_sync",
        "idle_s",
        "importance_ratio",
        "engine_vs_trainer_logprob_diff",
    ):
        assert key in printed
    assert set(printed["staleness_histogram"]) <= {"0", "1"}
    assert printed["weight_sync"]["pushes"] == 3  # the warm-up's version 0, then 1 and 2
    assert printed["importance_ratio"]["count"] > 0


def test_a_bad_config_is_refused_by_field(tmp_path: Path) -> None:
    config = tmp_path / "rl.json"
    config.write_text(json.dumps({"trainer": {"eta": "two"}}))
    args = _parse(["rl", "run", str(config)])
    with pytest.raises(InvalidInput, match=r"trainer\.eta must be an integer") as caught:
        args.func(args)
    assert caught.value.exit_code == 2


def test_metrics_are_served_on_loopback(shipyard_home: Path) -> None:
    controller = Controller(RLConfig())
    server = serve_metrics(controller, "127.0.0.1:0", shipyard_home)
    try:
        reply = httpx.get(f"http://127.0.0.1:{server.port}/metrics", timeout=10)
    finally:
        server.stop()
    assert reply.status_code == 200
    assert "shipyard_rl_policy_version 0.0" in reply.text
    assert 'shipyard_rl_alerts_total{kind="reward-hack"} 0.0' in reply.text
    with pytest.raises(InvalidInput, match="loopback"):
        serve_metrics(controller, "0.0.0.0:9", shipyard_home)
