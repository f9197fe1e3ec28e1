"""The console's eval pages and API read results stored through `evals.store`."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.web.conftest import BASE

from shipyard.db import database_url, open_database
from shipyard.evals import ResultStore, RunKey, get_task, judge_version
from shipyard.evals.scoring import Score
from shipyard.web import Console, create_app

# three checkpoints of one run; per item, 1 = correct
SCORES = {
    "c" * 64: [1, 0, 0, 0, 1, 0],
    "d" * 64: [1, 1, 0, 0, 1, 0],
    "e" * 64: [1, 1, 1, 0, 1, 1],
}


@pytest.fixture
def bare(console: Console) -> Iterator[TestClient]:
    with TestClient(create_app(console), base_url=BASE) as client:
        yield client


def fill(home: Path) -> list[str]:
    task = get_task("arith-mc")
    db = open_database(database_url(home))
    store, keys = ResultStore(db), []
    for model_id, values in SCORES.items():
        key = store.add_run(RunKey.of(model_id, task), "arith-mc", len(values))
        for index, value in enumerate(values):
            outcome = "correct" if value else "wrong"
            cluster = "add" if index % 2 else "mul"
            output = {"choice": value}
            store.record(
                db, key, judge_version(task), f"i{index}", cluster, output, Score(value, outcome)
            )
        keys.append(key)
    for model_id in ("e" * 64, "c" * 64):  # a training run's checkpoints, in its own order
        store.add_trigger("run:r1", model_id, lambda _ordinal: ["fast"])
    db.close()
    return keys


def test_runs_series_and_paired_diff(bare: TestClient, home: Path) -> None:
    keys = fill(home)
    listed = bare.get("/api/evals/runs").json()
    assert [(r["model_id"][0], r["task"], r["n"]) for r in listed] == [
        ("c", "arith-mc", 6),
        ("d", "arith-mc", 6),
        ("e", "arith-mc", 6),
    ]
    assert listed[0]["mean"] == pytest.approx(2 / 6) and listed[0]["se"] > 0
    series = bare.get("/api/evals/tasks/arith-mc").json()
    assert series["sources"] == ["run:r1"]
    assert [p["mean"] for p in series["points"]] == pytest.approx([2 / 6, 3 / 6, 5 / 6])
    page = bare.get("/evals/tasks/arith-mc").text
    assert page.count('<g class="point">') == 3 and "0.8333" in page
    assert f"/evals/compare?a={keys[1]}&amp;b={keys[0]}" in page  # each checkpoint's item diff
    run = bare.get("/api/evals/tasks/arith-mc", params={"source": "run:r1"}).json()["points"]
    assert [(p["checkpoint"], p["model_id"][0]) for p in run] == [(1, "e"), (2, "c")]
    assert bare.get("/evals/tasks/arith-mc?source=run:r1").text.count('<g class="point">') == 2
    diff = bare.get("/api/evals/compare", params={"a": keys[2], "b": keys[0]}).json()
    assert diff["difference"]["mean"] == pytest.approx(3 / 6)
    assert diff["changed_items"] == ["i1", "i2", "i5"]
    assert diff["items"][0] == {
        "item": "i1",
        "a": 1.0,
        "b": 0.0,
        "a_outcome": "correct",
        "b_outcome": "wrong",
    }
    html = bare.get("/evals/compare", params={"a": keys[2], "b": keys[0]}).text
    assert "Changed items (3)" in html and "0.5000" in html
    assert keys[1] in bare.get("/evals").text


def test_evals_empty_and_unknown(bare: TestClient) -> None:
    assert bare.get("/api/evals/runs").json() == []
    assert "no eval runs" in bare.get("/evals").text
    assert bare.get("/api/evals/tasks/arith-mc").json()["points"] == []
    assert "no arith-mc scores recorded" in bare.get("/evals/tasks/arith-mc").text
    missing = bare.get("/api/evals/compare", params={"a": "nope", "b": "nada"})
    assert missing.status_code == 404 and "nope" in missing.text
    assert bare.get("/api/evals/compare").status_code == 400
