"""The console's RL pages and API read the reports `shipyard.rl.report` makes, as
`shipyard rl run --report $SHIPYARD_HOME/rl/reports/NAME.json` stores them."""

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.web.conftest import BASE

from shipyard.rl import Controller, RLConfig, report
from shipyard.web import Console, create_app


@pytest.fixture
def bare(console: Console) -> Iterator[TestClient]:
    with TestClient(create_app(console), base_url=BASE) as client:
        yield client


def store_report(home: Path) -> None:
    """A controller's report after a run's worth of counters (no processes started)."""
    cfg = RLConfig.from_dict({"name": "arith", "model": {"d_model": 32, "n_heads": 2}})
    controller = Controller(cfg)
    controller.started = time.monotonic()
    controller.version = 3
    controller.warmup_accuracy = 0.25
    controller.accuracy = [(1, 0.5, 0.3), (3, 1.5, 0.55)]
    controller.counters.history.extend({"reward": r} for r in (0.1, 0.4, 0.7))
    controller.counters.staleness.update({0: 30, 1: 10})
    folder = home / "rl" / "reports"
    folder.mkdir(parents=True)
    (folder / "arith.json").write_text(json.dumps(report(controller)))


def test_rl_run_reward_accuracy_and_staleness(bare: TestClient, home: Path) -> None:
    store_report(home)
    (line,) = bare.get("/api/rl/runs").json()
    assert (line["name"], line["versions"], line["reward_last"]) == ("arith", 3, 0.7)
    assert (line["accuracy_warmup"], line["accuracy_final"]) == (0.25, 0.55)
    whole = bare.get("/api/rl/runs/arith").json()
    assert whole["staleness_histogram"] == {"0": 30, "1": 10}
    page = bare.get("/rl/arith").text
    assert "30 (75.0%)" in page and "10 (25.0%)" in page  # the histogram's bars
    assert 'aria-label="reward"' in page and 'aria-label="accuracy"' in page
    assert 'href="/rl/arith"' in bare.get("/rl").text


def test_rl_empty_unknown_and_damaged(bare: TestClient, home: Path) -> None:
    assert bare.get("/api/rl/runs").json() == []
    assert "no RL reports" in bare.get("/rl").text
    assert bare.get("/api/rl/runs/nope").status_code == 404
    assert bare.get("/api/rl/runs/..%2Fx").status_code in (400, 404)
    folder = home / "rl" / "reports"
    folder.mkdir(parents=True)
    (folder / "bad.json").write_text("[1, 2")
    (line,) = bare.get("/api/rl/runs").json()
    assert line["name"] == "bad" and "not JSON" in line["error"]
    assert bare.get("/api/rl/runs/bad").status_code >= 500
